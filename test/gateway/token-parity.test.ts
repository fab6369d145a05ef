/**
 * Token parity between kvgate and the workers whose KV events it routes on: probed at start against
 * real simulated workers (their /tokenize, vLLM's shape), a disagreeing tokenizer refused (events
 * unused, /admin/workers and a metric say why, or the start fails with strictParity), and the share
 * of event-reported blocks kvgate predicted watched while serving chat, tools, multi-part content,
 * the Responses API and completions.
 */
import assert from 'node:assert/strict';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import { join } from 'node:path';
import { ConfigError } from '../../src/config/index.js';
import { createGateway } from '../../src/gateway/gateway.js';
import { probeTokenParity, PARITY_SAMPLES } from '../../src/gateway/fleet-watch/token-parity.js';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { createPromptTokenizer } from '../../src/tokenizer/registry.js';
import { HELLO_WORLD_BPE, withTokenizerDir } from '../tokenizer/fixtures.js';
import { configFor, MODEL, metricValue, post, startGateway, waitFor } from './helpers.js';

async function simsWithEvents(n: number): Promise<SimWorker[]> {
  return Promise.all(
    Array.from({ length: n }, () => startSimWorker({ port: 0, model: MODEL, speed: 100, kvEvents: { endpoint: 'tcp://127.0.0.1:0', replayEndpoint: 'tcp://127.0.0.1:0' } })),
  );
}

function poolOf(sims: SimWorker[]) {
  return [{ name: 'main', model: MODEL, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}`, kvEvents: { endpoint: s.kvEventsEndpoint!, replayEndpoint: s.kvReplayEndpoint! } })) }];
}

const admin = async (url: string, id: string): Promise<any> => ((await (await fetch(url + '/admin/workers')).json()) as any[]).find((w) => w.id === id);

test("the estimate tokenizer gives the simulated worker's /tokenize ids on every probe prompt", async () => {
  const [sim] = await simsWithEvents(1);
  try {
    const report = await probeTokenParity({ workerId: 'w0', workerUrl: sim!.url, model: MODEL, tokenizer: await createPromptTokenizer('estimate') });
    assert.equal(report.verdict, 'match', report.message);
    assert.deepEqual(report.samples.map((s) => s.kind), PARITY_SAMPLES.map((s) => s.kind));
    for (const s of report.samples) {
      assert.equal(s.match, true, s.kind);
      assert.equal(s.via, 'tokenize');
      assert.ok(s.kvgateTokens > 16, `${s.kind}: more than one block`);
      assert.equal(s.kvgateTokens, s.workerTokens);
    }
  } finally {
    await sim!.close();
  }
});

test('a tokenizer that disagrees is named with the first differing token and the fix; an unreachable worker is unknown', async () => {
  const [sim] = await simsWithEvents(1);
  try {
    await withTokenizerDir({ 'tokenizer.json': HELLO_WORLD_BPE }, async (dir) => {
      const spec = `hf:${join(dir, 'tokenizer.json')}`;
      const tokenizer = await createPromptTokenizer(spec, { threads: 0 });
      const report = await probeTokenParity({ workerId: 'w0', workerUrl: sim!.url, model: MODEL, pool: 'main', tokenizer });
      assert.equal(report.verdict, 'mismatch');
      assert.match(report.message, new RegExp(`^pool main: tokenizer '${spec.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}' gives different ids than worker w0's /tokenize for a completion prompt \\(first difference at token 0;`));
      assert.match(report.message, /set tokenizers\.models\.llama-3\.1-8b to 'hf:<path to the model's tokenizer\.json>' .* or 'remote'$/);
    });
  } finally {
    await sim!.close();
  }
  const gone = await probeTokenParity({ workerId: 'w0', workerUrl: 'http://127.0.0.1:9', model: MODEL, tokenizer: await createPromptTokenizer('estimate'), timeoutMs: 500 });
  assert.equal(gone.verdict, 'unknown');
  assert.match(gone.message, /^token parity with worker w0 not checked: POST http:\/\/127\.0\.0\.1:9\/tokenize failed/);
});

test('the render endpoint is asked first where the worker has it, and /tokenize where it has not', async () => {
  // A worker with vLLM's /v1/chat/completions/render (GenerateRequest: token_ids), giving the ids
  // the simulated worker's /tokenize gives.
  const [sim] = await simsWithEvents(1);
  const asked: string[] = [];
  const fetchImpl: typeof fetch = async (input, init) => {
    const u = String(input);
    asked.push(new URL(u).pathname);
    if (u.endsWith('/v1/chat/completions/render')) {
      const b = JSON.parse(String(init!.body)) as { messages: unknown; model: string };
      const t = (await (await fetch(sim!.url + '/tokenize', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: b.model, messages: b.messages }) })).json()) as { tokens: number[] };
      return new Response(JSON.stringify({ token_ids: t.tokens, sampling_params: {}, model: b.model }), { status: 200, headers: { 'content-type': 'application/json' } });
    }
    return fetch(input, init);
  };
  try {
    const report = await probeTokenParity({ workerId: 'w0', workerUrl: sim!.url, model: MODEL, tokenizer: await createPromptTokenizer('estimate'), fetchImpl });
    assert.equal(report.verdict, 'match', report.message);
    assert.deepEqual(report.samples.map((s) => s.via), ['tokenize', 'render', 'render', 'render']);
    assert.deepEqual(asked, ['/tokenize', '/v1/chat/completions/render', '/v1/chat/completions/render', '/v1/chat/completions/render']);
    // The simulated worker has no render endpoint: /tokenize after its 404.
    asked.length = 0;
    const plain = await probeTokenParity({ workerId: 'w0', workerUrl: sim!.url, model: MODEL, tokenizer: await createPromptTokenizer('estimate'), fetchImpl: (i, n) => (asked.push(new URL(String(i)).pathname), fetch(i, n)) });
    assert.equal(plain.verdict, 'match');
    assert.deepEqual(asked.slice(0, 3), ['/tokenize', '/v1/chat/completions/render', '/tokenize']);
  } finally {
    await sim!.close();
  }
});

test('with matching tokens the gateway uses the events, and watches their parity over chat, tools, multi-part, Responses and completions', async () => {
  const sims = await simsWithEvents(2);
  const { gw, url } = await startGateway([], { pools: poolOf(sims), policy: { name: 'kvgate' } });
  try {
    await waitFor(async () => (await admin(url, 'w0'))?.tokenParity?.verdict === 'match' && (await admin(url, 'w1'))?.tokenParity?.verdict === 'match', 5000);
    const system = 'You are the dispatcher of a freight company; answer with the container ids you are given. '.repeat(4);
    const tools = [{ type: 'function', function: { name: 'locate', description: 'Where a container is', parameters: { type: 'object', properties: { id: { type: 'string' } } } } }];
    for (let i = 0; i < 12; i++) {
      const n = `${i} ${'#'.repeat(i)}`;
      const rs = await Promise.all([
        post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'system', content: `${n} ${system}` }, { role: 'user', content: 'Where is 7?' }], tools, max_tokens: 2 }),
        post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: [{ type: 'text', text: `${n} manifest:` }, { type: 'text', text: system }] }], max_tokens: 2 }),
        post(url + '/v1/responses', { model: MODEL, instructions: `${n} ${system}`, input: [{ role: 'user', content: [{ type: 'input_text', text: 'Which are flagged?' }] }], max_output_tokens: 2 }),
        post(url + '/v1/completions', { model: MODEL, prompt: `${n} ${system}`, max_tokens: 2 }),
      ]);
      for (const r of rs) assert.equal(r.status, 200, r.text);
    }
    let seen: any[] = [];
    await waitFor(async () => {
      seen = await Promise.all(['w0', 'w1'].map((id) => admin(url, id)));
      return seen.every((w) => w.kvEventsParity?.blocks > 0) && seen.reduce((a, w) => a + w.kvEventsParity.blocks, 0) >= 48 * 4;
    }, 10_000);
    for (const w of seen) {
      assert.equal(w.kvEvents.source, 'events');
      assert.ok(w.kvEventsParity.ratio >= 0.95, `${w.id}: parity ${w.kvEventsParity.ratio} over ${w.kvEventsParity.blocks} blocks`);
      assert.equal(w.kvEventsParity.low, false);
    }
    const m = await (await fetch(url + '/metrics')).text();
    for (const id of ['w0', 'w1']) {
      assert.equal(metricValue(m, 'kvgate_token_parity', { worker: id, verdict: 'match' }), 1);
      assert.equal(metricValue(m, 'kvgate_token_parity', { worker: id, verdict: 'mismatch' }), 0);
      assert.ok((metricValue(m, 'kvgate_kv_events_parity_ratio', { worker: id }) ?? 0) >= 0.95);
    }
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
});

test("a tokenizer that disagrees with the workers is refused: their events go unused, and /admin/workers, a metric and the log say why", async () => {
  const sims = await simsWithEvents(1);
  const lines: string[] = [];
  const logger = createLogger({ level: 'warn', destination: new Writable({ write: (c, _e, cb) => (lines.push(String(c)), cb()) }) });
  try {
    await withTokenizerDir({ 'tokenizer.json': HELLO_WORLD_BPE }, async (dir) => {
      const gw = createGateway(configFor([], { pools: poolOf(sims), policy: { name: 'kvgate' }, tokenizers: { models: { [MODEL]: `hf:${join(dir, 'tokenizer.json')}` }, threads: 0 } }), { logger });
      const { url } = await gw.start();
      try {
        await waitFor(async () => (await admin(url, 'w0'))?.tokenParity?.verdict === 'mismatch', 5000);
        const w = await admin(url, 'w0');
        assert.equal(w.prefixIndex.source, 'approximate');
        assert.match(w.prefixIndex.reason, /^token parity: pool main: tokenizer 'hf:.*' gives different ids than worker w0's \/tokenize/);
        assert.equal(w.kvEvents, undefined, 'no subscriber');
        // Requests are still served, routed on the approximate index.
        const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'hello world hello world', max_tokens: 2 });
        assert.equal(r.status, 200);
        const m = await (await fetch(url + '/metrics')).text();
        assert.equal(metricValue(m, 'kvgate_token_parity', { worker: 'w0', verdict: 'mismatch' }), 1);
        assert.ok(lines.some((l) => /"level":50/.test(l) && /kv events refused: pool main: tokenizer/.test(l) && /tokenizers\.models/.test(l)), lines.join(''));
      } finally {
        await gw.close();
      }
    });
  } finally {
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('strictParity refuses to start with a tokenizer that disagrees, naming the fix', async () => {
  const sims = await simsWithEvents(1);
  try {
    await withTokenizerDir({ 'tokenizer.json': HELLO_WORLD_BPE }, async (dir) => {
      const gw = createGateway(configFor([], { pools: poolOf(sims), tokenizers: { models: { [MODEL]: `hf:${join(dir, 'tokenizer.json')}` }, threads: 0, strictParity: true } }), { logger: createLogger({ level: 'silent' }) });
      try {
        await assert.rejects(gw.start(), (e: unknown) => e instanceof ConfigError && /tokenizers \(strictParity\): pool main: tokenizer 'hf:.*' gives different ids .* set tokenizers\.models\.llama-3\.1-8b to/.test(e.message));
      } finally {
        await gw.close();
      }
    });
    // With the estimate (which the simulated worker matches) the same config starts.
    const { gw } = await startGateway([], { pools: poolOf(sims), tokenizers: { strictParity: true } });
    await gw.close();
  } finally {
    await Promise.all(sims.map((s) => s.close()));
  }
});

test('a worker that was down at start is probed when it comes up', async () => {
  // Two ports nothing listens on yet: the worker's HTTP and its KV-event socket.
  const free = async (): Promise<number> => {
    const s = createServer();
    await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
    const p = (s.address() as AddressInfo).port;
    await new Promise<void>((r) => s.close(() => r()));
    return p;
  };
  const [httpPort, eventsPort] = [await free(), await free()];
  const endpoint = `tcp://127.0.0.1:${eventsPort}`;
  const { gw, url } = await startGateway([], {
    pools: [{ name: 'main', model: MODEL, workers: [{ url: `http://127.0.0.1:${httpPort}`, id: 'late', kvEvents: { endpoint } }] }],
  });
  let sim: SimWorker | undefined;
  try {
    await waitFor(async () => (await admin(url, 'late'))?.tokenParity?.verdict === 'unknown' && (await admin(url, 'late')).healthy === false, 5000);
    await new Promise((r) => setTimeout(r, 600)); // the service sees it down (it looks every 250 ms)
    sim = await startSimWorker({ port: httpPort, model: MODEL, speed: 100, kvEvents: { endpoint } });
    await waitFor(async () => (await admin(url, 'late'))?.tokenParity?.verdict === 'match', 10_000);
  } finally {
    await gw.close();
    await sim?.close();
  }
});
