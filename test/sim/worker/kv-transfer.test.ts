/** The simulated worker's side of vLLM's P/D exchange: kv_transfer_params out of a prefill, the KV pulled by a decode. */
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { customKvLink } from '../../../src/engine/kv-link.js';
import { startSimWorker, type SimWorker } from '../../../src/sim/worker/server.js';
import { longPrompt, postJson, postStream, waitFor } from './helpers.js';

const MODEL = 'llama-3.1-8b';
/** What vLLM's proxy sends the prefill worker (toy_proxy_server.py). */
const PREFILL_KV = { do_remote_decode: true, do_remote_prefill: false, remote_engine_id: null, remote_block_ids: null, remote_host: null, remote_port: null };

let p: SimWorker;
let d: SimWorker;
let plain: SimWorker;

before(async () => {
  // A slow link (2 Gb/s) so that a transfer shows in the decode's time.
  [p, d, plain] = await Promise.all([
    startSimWorker({ model: MODEL, speed: 20, kvRole: 'prefill', hashSeed: 1 }),
    startSimWorker({ model: MODEL, speed: 20, kvRole: 'decode', hashSeed: 1, kvLink: customKvLink(2, 0) }),
    startSimWorker({ model: MODEL, speed: 20, hashSeed: 1 }),
  ]);
});

after(async () => {
  await Promise.all([p.close(), d.close(), plain.close()]);
});

async function prefill(w: SimWorker, prompt: string): Promise<any> {
  const r = await postJson(w, '/v1/completions', { model: MODEL, prompt, max_tokens: 1, stream: false, kv_transfer_params: PREFILL_KV });
  assert.equal(r.status, 200);
  return r.json;
}

describe('prefill worker', () => {
  test('answers do_remote_decode with the kv_transfer_params the NixlConnector returns, holding the blocks', async () => {
    const prompt = longPrompt(800, 'p1');
    const json = await prefill(p, prompt);
    const kv = json.kv_transfer_params;
    assert.equal(kv.do_remote_prefill, true);
    assert.equal(kv.do_remote_decode, false);
    assert.equal(typeof kv.remote_engine_id, 'string');
    assert.equal(typeof kv.remote_request_id, 'string');
    assert.equal(kv.remote_host, '127.0.0.1');
    assert.equal(kv.remote_port, p.port);
    assert.equal(kv.tp_size, 1);
    const promptTokens = json.usage.prompt_tokens;
    // The blocks the prompt and its one output token fill.
    assert.equal(kv.remote_block_ids.length, Math.ceil((promptTokens + 1) / 16));
    assert.equal(p.stats().kv?.held, 1);
    // Nobody pulls: the side channel frees them when told to.
    const done = await fetch(`${p.url}/kv_transfer/done`, { method: 'POST', body: JSON.stringify({ remote_engine_id: kv.remote_engine_id, remote_request_id: kv.remote_request_id }) });
    assert.equal(done.status, 200);
    assert.equal(p.stats().kv?.held, 0);
  });

  test('a worker without a role ignores kv_transfer_params, as vLLM without a KV connector', async () => {
    const json = await prefill(plain, longPrompt(100, 'p2'));
    assert.equal(json.kv_transfer_params, undefined);
  });

  test('held blocks are freed after the hold timeout', async () => {
    // 4 s of simulated time at speed 20: 200 ms of wall time, long enough for the answer to be read
    // before the blocks go, however busy the machine, and short enough to wait for.
    const w = await startSimWorker({ model: MODEL, speed: 20, kvRole: 'prefill', kvHoldTimeoutMs: 4000 });
    try {
      await prefill(w, longPrompt(300, 'p3'));
      assert.equal(w.stats().kv?.held, 1);
      await waitFor(() => w.stats().kv?.held === 0, 5000);
      assert.equal(w.stats().kv?.expired, 1);
    } finally {
      await w.close();
    }
  });
});

describe('decode worker', () => {
  test('pulls the KV instead of recomputing the prompt, frees the prefill worker, streams the answer', async () => {
    const prompt = longPrompt(3000, 'd1');
    const pj = await prefill(p, prompt);
    const before = d.stats().computedPromptTokens;
    const r = await postStream(d, '/v1/completions', {
      model: MODEL, prompt, max_tokens: 8, ignore_eos: true, stream_options: { include_usage: true }, kv_transfer_params: pj.kv_transfer_params,
    });
    assert.equal(r.status, 200);
    const usage = r.events.find((e) => e !== '[DONE]' && e.usage)?.usage;
    assert.equal(usage.prompt_tokens, pj.usage.prompt_tokens);
    assert.equal(usage.completion_tokens, 8);
    assert.equal(r.events.at(-1), '[DONE]');
    // Only the last prompt token is computed on the decode worker.
    assert.equal(d.stats().computedPromptTokens - before, 1);
    assert.equal(d.stats().kv?.pulledTokens, pj.usage.prompt_tokens);
    await waitFor(() => p.stats().kv?.held === 0);
    // The same answer as a worker that computed the prompt itself.
    const whole = await postStream(plain, '/v1/completions', { model: MODEL, prompt, max_tokens: 8, ignore_eos: true });
    const text = (events: any[]) => events.filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.text ?? '').join('');
    assert.equal(text(r.events), text(whole.events));
  });

  test('a read of KV the prefill worker no longer holds fails the request (kv_load_failure_policy "fail")', async () => {
    const pj = await prefill(p, longPrompt(500, 'd2'));
    const kv = pj.kv_transfer_params;
    await fetch(`${p.url}/kv_transfer/done`, { method: 'POST', body: JSON.stringify({ remote_engine_id: kv.remote_engine_id, remote_request_id: kv.remote_request_id }) });
    const r = await postJson(d, '/v1/completions', { model: MODEL, prompt: longPrompt(500, 'd2'), max_tokens: 4, kv_transfer_params: kv });
    assert.equal(r.status, 500);
    assert.match(r.json.error.message, /KV transfer failed/);
  });
});
