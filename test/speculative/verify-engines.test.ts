/**
 * Live verification by each engine's cheapest route, end to end over loopback HTTP: an SGLang
 * target verifies through /generate with logprob_start_len (its cached context reused: its
 * cached-token count grows by the context every round); a vLLM target through
 * /inference/v1/generate with the prefix cache read; a vLLM without that route answers 404 once
 * and is verified through /v1/completions from then on. At temperature 0 the output is the
 * target's own in every case.
 */
import assert from 'node:assert/strict';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, describe, it } from 'node:test';
import { parseConfig } from '../../src/config/index.js';
import { createGateway, type Gateway } from '../../src/gateway/gateway.js';
import { FixedK } from '../../src/speculative/controller.js';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { post } from '../gateway/helpers.js';
import { metricValue } from '../support.js';
import { DRAFT, TARGET, startDraft } from './helpers.js';

const PROMPT =
  'The harbour master kept a ledger of every ship that came in from the northern passage, noting the weather, ' +
  'the cargo, the crew and the hour of arrival. Over forty years the ledger grew into six volumes, and the town ' +
  'came to treat it as its memory: disputes over moorings, inheritances and old debts were settled by reading it aloud. ' +
  'Write the next chapter of this story';

async function startGateway(targetUrl: string, draftUrl: string, targetEngine?: 'vllm' | 'sglang'): Promise<{ gw: Gateway; url: string }> {
  const gw = createGateway(
    parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      pools: [
        { name: 'target', model: TARGET, ...(targetEngine ? { engine: targetEngine } : {}), workers: [{ url: targetUrl, id: 't0' }] },
        { name: 'draft', model: DRAFT, workers: [{ url: draftUrl, id: 'd0' }] },
      ],
      scrape: { intervalMs: 200 },
      health: { intervalMs: 1000, timeoutMs: 800, failuresToMarkDown: 5 },
      log: { level: 'silent' },
      // A generous draft deadline: a draft dropped on a loaded machine would end the rounds early.
      speculative: { cascades: [{ model: TARGET, targetPool: 'target', draftPool: 'draft', k: 4 }], draftDeadline: { floorMs: 5_000 } },
    }),
    // Every round speculates (k = 4): these tests are about the verification call, not when to make it.
    { logger: createLogger({ level: 'silent' }), speculative: { controller: new FixedK(new Map([[TARGET, 4]])) } },
  );
  const { url } = await gw.start();
  return { gw, url };
}

const body = { model: TARGET, prompt: PROMPT, temperature: 0, max_tokens: 40 };

async function rounds(gwUrl: string): Promise<number> {
  const m = await (await fetch(`${gwUrl}/metrics`)).text();
  return metricValue(m, 'kvgate_spec_rounds_total', { model: TARGET }) ?? 0;
}

async function promptLength(target: SimWorker, path: '/tokenize' | '/v1/tokenize'): Promise<number> {
  const r = await post(`${target.url}${path}`, { model: TARGET, prompt: PROMPT });
  return (r.json.tokens as number[]).length;
}

describe('verification against an SGLang target', () => {
  const closers: Array<() => Promise<void>> = [];
  after(async () => {
    for (const c of closers.reverse()) await c();
  });

  it('goes through /generate from logprob_start_len, reusing the cached context every round', async () => {
    const target = await startSimWorker({ engine: 'sglang', model: TARGET, tp: 4, speed: 200 });
    closers.push(() => target.close());
    const draft = await startDraft({ fidelity: 0.7 });
    closers.push(() => draft.close());
    const g = await startGateway(target.url, draft.url, 'sglang');
    closers.push(() => g.gw.close());

    const alone = await post(`${target.url}/v1/completions`, body);
    assert.equal(alone.status, 200, alone.text);
    const n = await promptLength(target, '/v1/tokenize');
    const cachedBefore = target.engine.stats().prefixHits;
    const via = await post(`${g.url}/v1/completions`, body);
    assert.equal(via.status, 200, via.text);
    assert.equal(via.headers.get('x-kvgate-speculative'), 'cascade');
    assert.equal(via.json.choices[0].text, alone.json.choices[0].text);
    const r = await rounds(g.url);
    assert.ok(r >= 3, `rounds: ${r}`);
    // Every round's verification reads the context from the radix cache up to logprob_start_len
    // (C - 1, whole 16-token pages in the simulated engine): the worker's own counter shows it.
    const cached = target.engine.stats().prefixHits - cachedBefore;
    assert.ok(cached >= r * (n - 16), `cached ${cached} tokens over ${r} rounds of a ${n}-token prompt`);
    const page = await (await fetch(`${target.url}/metrics`)).text();
    assert.equal(metricValue(page, 'sglang:cached_tokens_total'), target.engine.stats().prefixHits);

    // A chat prompt's tokens cannot be learned from SGLang (/v1/tokenize takes no messages): plain path.
    const chat = await post(`${g.url}/v1/chat/completions`, { model: TARGET, messages: [{ role: 'user', content: 'hello' }], max_tokens: 8, temperature: 0 });
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.headers.get('x-kvgate-speculative'), null);
    const m = await (await fetch(`${g.url}/metrics`)).text();
    assert.equal(metricValue(m, 'kvgate_spec_requests_total', { model: TARGET, path: 'plain', reason: 'target_cannot_template_chat' }), 1);
  });
});

/** An HTTP forwarder that counts the paths asked of the worker behind it. */
async function countingProxy(target: string): Promise<{ url: string; counts: Map<string, number>; server: Server }> {
  const counts = new Map<string, number>();
  const server = createServer((req, res) => {
    const path = (req.url ?? '/').split('?')[0]!;
    counts.set(path, (counts.get(path) ?? 0) + 1);
    const parts: Buffer[] = [];
    req.on('data', (c: Buffer) => parts.push(c));
    req.on('end', () => {
      fetch(`${target}${req.url}`, { method: req.method, headers: { 'content-type': 'application/json' }, body: req.method === 'POST' ? Buffer.concat(parts) : undefined })
        .then(async (r) => {
          const text = await r.text();
          res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
          res.end(text);
        })
        .catch(() => res.destroy());
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, counts, server };
}

describe('verification against a vLLM target', () => {
  const closers: Array<() => Promise<void>> = [];
  after(async () => {
    for (const c of closers.reverse()) await c();
  });

  it('reads the prefix cache through /inference/v1/generate', async () => {
    const target = await startSimWorker({ model: TARGET, tp: 4, speed: 200 });
    closers.push(() => target.close());
    const draft = await startDraft({ fidelity: 0.7 });
    closers.push(() => draft.close());
    const g = await startGateway(target.url, draft.url);
    closers.push(() => g.gw.close());

    const alone = await post(`${target.url}/v1/completions`, body);
    const n = await promptLength(target, '/tokenize');
    const hitsBefore = target.engine.stats().prefixHits;
    const via = await post(`${g.url}/v1/completions`, body);
    assert.equal(via.status, 200, via.text);
    assert.equal(via.headers.get('x-kvgate-speculative'), 'cascade');
    assert.equal(via.json.choices[0].text, alone.json.choices[0].text);
    const r = await rounds(g.url);
    assert.ok(r >= 3, `rounds: ${r}`);
    // /v1/completions with prompt_logprobs would have read none of it (skip_reading_prefix_cache).
    const hits = target.engine.stats().prefixHits - hitsBefore;
    assert.ok(hits >= r * (n - 16), `cache hits ${hits} tokens over ${r} rounds of a ${n}-token prompt`);
  });

  it('falls back to /v1/completions when the worker has no /inference/v1/generate, and remembers it', async () => {
    const target = await startSimWorker({ model: TARGET, tp: 4, speed: 200, inferenceGenerate: false });
    closers.push(() => target.close());
    const proxy = await countingProxy(target.url);
    closers.push(() => new Promise<void>((r) => proxy.server.close(() => r())));
    const draft = await startDraft({ fidelity: 0.7 });
    closers.push(() => draft.close());
    const g = await startGateway(proxy.url, draft.url);
    closers.push(() => g.gw.close());

    const alone = await post(`${target.url}/v1/completions`, body);
    for (let i = 0; i < 3; i++) {
      const via = await post(`${g.url}/v1/completions`, body);
      assert.equal(via.status, 200, via.text);
      assert.equal(via.headers.get('x-kvgate-speculative'), 'cascade');
      assert.equal(via.json.choices[0].text, alone.json.choices[0].text);
    }
    const r = await rounds(g.url);
    assert.equal(proxy.counts.get('/inference/v1/generate'), 1, 'asked once, then remembered');
    assert.ok((proxy.counts.get('/v1/completions') ?? 0) >= r, `completions ${proxy.counts.get('/v1/completions')} for ${r} rounds`);
  });
});
