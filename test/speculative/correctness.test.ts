/**
 * The cascade's correctness guarantees, each against real simulated workers over loopback HTTP:
 *   - at temperature > 0 its tokens are distributed as the target's own (chi-squared on the first
 *     and second generated tokens against the target's exact distributions, fixed seeds, so the
 *     test is deterministic; the same samples tested against the draft's distribution fail, which
 *     shows the test has the power to fail);
 *   - no unverified token reaches a client (a draft that lies about its tokens changes nothing);
 *   - a draft worker failing mid-request is replaced by target-only generation, invisibly;
 *   - a client that goes away cancels both pools' work;
 *   - workers that cannot verify are refused at start-up, the missing capability named.
 */
import assert from 'node:assert/strict';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import { ConfigError } from '../../src/config/index.js';
import { createSyntheticLm } from '../../src/engine/synthetic-lm.js';
import { createGateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { estimateTokenizer } from '../../src/tokenizer/index.js';
import { metricValue, parseSse, waitFor } from '../support.js';
import { TARGET, cascadeConfig, chiSquared, chiSquaredCritical001, startCascade, startDraft, startTarget } from './helpers.js';

async function complete(url: string, body: Record<string, unknown>): Promise<any> {
  const r = await fetch(`${url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: TARGET, ...body }) });
  const text = await r.text();
  assert.equal(r.status, 200, text);
  return body.stream ? parseSse(text) : JSON.parse(text);
}

/** softmax(logprob / T) over the model's candidates, written independently of the gateway's code. */
function exact(lm: ReturnType<typeof createSyntheticLm>, context: number[], t: number): Map<number, number> {
  const d = lm.distribution(context);
  let z = 0;
  for (let i = 0; i < d.tokens.length; i++) z += Math.exp(d.logprobs[i]! / t);
  const out = new Map<number, number>();
  for (let i = 0; i < d.tokens.length; i++) out.set(d.tokens[i]!, Math.exp(d.logprobs[i]! / t) / z);
  return out;
}

/** Run `n` tasks, `width` at a time. */
async function pool<T>(n: number, width: number, task: (i: number) => Promise<T>): Promise<T[]> {
  const out = new Array<T>(n);
  let next = 0;
  await Promise.all(
    Array.from({ length: width }, async () => {
      while (next < n) {
        const i = next++;
        out[i] = await task(i);
      }
    }),
  );
  return out;
}

/** A proxy in front of a worker: `intercept` may answer a request itself. */
async function proxy(
  upstream: string,
  intercept: (path: string, body: any, n: number, res: ServerResponse) => boolean,
): Promise<{ url: string; calls: () => number; close(): Promise<void> }> {
  let n = 0;
  const server = createServer(async (req: IncomingMessage, res: ServerResponse) => {
    const chunks: Buffer[] = [];
    for await (const c of req) chunks.push(c as Buffer);
    const raw = Buffer.concat(chunks).toString('utf8');
    const path = req.url ?? '/';
    const body = raw ? JSON.parse(raw) : null;
    if (path === '/v1/completions') n++;
    if (intercept(path, body, n, res)) return;
    try {
      const r = await fetch(`${upstream}${path}`, { method: req.method, headers: { 'content-type': 'application/json' }, body: req.method === 'POST' ? raw : undefined });
      res.writeHead(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' });
      res.end(Buffer.from(await r.arrayBuffer()));
    } catch {
      // The worker behind is gone (closed at the end of a suite while the gateway's probe or
      // scrape was passing through): the caller sees a reset, as it would from a dead worker.
      res.destroy();
    }
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    calls: () => n,
    close: () => new Promise<void>((r) => { server.closeAllConnections(); server.close(() => r()); }),
  };
}

const PROMPT = estimateTokenizer.encode('The old harbour town woke slowly as the fishing boats came back with the tide');

describe('at temperature > 0 the cascade samples from the target’s distribution', () => {
  let target: SimWorker;
  let draft: SimWorker;
  let url: string;
  let close: () => Promise<void>;

  before(async () => {
    target = await startTarget(500);
    draft = await startDraft({ acceptance: 0.5, speed: 500 });
    const c = await startCascade([target.url], [draft.url]);
    url = c.url;
    close = () => c.gw.close();
  });
  after(async () => {
    await close();
    await draft.close();
    await target.close();
  });

  for (const temperature of [1, 0.6]) {
    it(`first and second tokens pass chi-squared against the target at temperature ${temperature} (and fail against the draft)`, async () => {
      const N = 1000;
      const outs = await pool(N, 4, async (i) => {
        const r = await complete(url, { prompt: PROMPT, max_tokens: 3, temperature, seed: 1000 + i });
        return r;
      });
      // Token ids of the output come back through the target's tokenizer: re-encode the text.
      const first = new Map<number, number>();
      const second = new Map<number, number>();
      for (const r of outs) {
        const ids = estimateTokenizer.encode(PROMPT.length > 0 ? estimateTokenizer.decode(PROMPT) + r.choices[0].text : r.choices[0].text).slice(PROMPT.length);
        // The estimate tokenizer round-trips the synthetic model's words; EOS adds no text.
        if (ids.length >= 1) first.set(ids[0]!, (first.get(ids[0]!) ?? 0) + 1);
        if (ids.length >= 2) second.set(ids[1]!, (second.get(ids[1]!) ?? 0) + 1);
      }
      const lm = createSyntheticLm(TARGET);
      const p1 = exact(lm, PROMPT, temperature);
      const p2 = new Map<number, number>();
      for (const [x1, px1] of p1) {
        if (x1 === lm.eosTokenId) continue;
        for (const [x2, px2] of exact(lm, [...PROMPT, x1], temperature)) p2.set(x2, (p2.get(x2) ?? 0) + px1 * px2);
      }
      // Outputs that ended at once (EOS) have no visible first token: compare the visible ones.
      const eos1 = p1.get(lm.eosTokenId) ?? 0;
      const visible1 = new Map([...p1].filter(([t]) => t !== lm.eosTokenId).map(([t, p]) => [t, p / (1 - eos1)]));
      const n1 = [...first.values()].reduce((a, b) => a + b, 0);
      const c1 = chiSquared(first, visible1, n1);
      assert.ok(c1.stat < chiSquaredCritical001(c1.df), `first token: chi2 ${c1.stat.toFixed(1)} df ${c1.df}`);
      const eos2 = p2.get(lm.eosTokenId) ?? 0;
      const visible2 = new Map([...p2].filter(([t]) => t !== lm.eosTokenId).map(([t, p]) => [t, p / (1 - eos2)]));
      const n2 = [...second.values()].reduce((a, b) => a + b, 0);
      const c2 = chiSquared(second, visible2, n2);
      assert.ok(c2.stat < chiSquaredCritical001(c2.df), `second token: chi2 ${c2.stat.toFixed(1)} df ${c2.df}`);
      // The same test rejects the draft's distribution: it can fail.
      const dlm = createSyntheticLm('llama-3.1-8b', { draftOf: TARGET, fidelity: 0 });
      const q1 = exact(dlm, PROMPT, temperature);
      const qv = new Map([...q1].filter(([t]) => t !== lm.eosTokenId));
      const qs = [...qv.values()].reduce((a, b) => a + b, 0);
      for (const [t, p] of qv) qv.set(t, p / qs);
      const wrong = chiSquared(first, qv, n1);
      assert.ok(wrong.stat > chiSquaredCritical001(wrong.df), `against the draft: chi2 ${wrong.stat.toFixed(1)}`);
      // Both verdicts happened: some draft tokens were accepted, some rejected.
      const m = await (await fetch(`${url}/metrics`)).text();
      const proposed = metricValue(m, 'kvgate_spec_draft_tokens_total', { model: TARGET, class: 'default' }) ?? 0;
      const accepted = metricValue(m, 'kvgate_spec_accepted_tokens_total', { model: TARGET, class: 'default' }) ?? 0;
      assert.ok(accepted > 0.1 * proposed && accepted < 0.9 * proposed, `accepted ${accepted} of ${proposed}`);
    });
  }

  it('repeats itself exactly given the same seed', async () => {
    const a = await complete(url, { prompt: PROMPT, max_tokens: 30, temperature: 1, seed: 42 });
    const b = await complete(url, { prompt: PROMPT, max_tokens: 30, temperature: 1, seed: 42 });
    assert.equal(a.choices[0].text, b.choices[0].text);
  });
});

describe('no unverified token reaches a client', () => {
  let target: SimWorker;
  let draft: SimWorker;
  let liar: Awaited<ReturnType<typeof proxy>>;
  let url: string;
  let close: () => Promise<void>;
  // The token the lying draft always proposes: a rare word the target gives no probability in
  // these contexts (the accepted count below would show it otherwise), so every one is rejected.
  const BOGUS = 7777;

  before(async () => {
    target = await startTarget(500);
    draft = await startDraft({ fidelity: 0.9, speed: 500 });
    // A draft that claims, with certainty, a token of its own choosing at every position.
    liar = await proxy(draft.url, (path, body, _n, res) => {
      if (path !== '/v1/completions' || !body || body.logprobs === undefined || body.prompt_logprobs !== undefined) return false;
      const k = body.max_tokens as number;
      const name = `token_id:${BOGUS}`;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({
        choices: [{ index: 0, text: '', finish_reason: 'length', logprobs: { tokens: Array(k).fill(name), token_logprobs: Array(k).fill(0), top_logprobs: Array(k).fill({ [name]: 0 }), text_offset: Array(k).fill(0) } }],
      }));
      return true;
    });
    const c = await startCascade([target.url], [liar.url], { spec: { probe: false } });
    url = c.url;
    close = () => c.gw.close();
  });
  after(async () => {
    await close();
    await liar.close();
    await draft.close();
    await target.close();
  });

  it('a lying draft cannot get its token into the output, streamed or not, greedy or sampled', async () => {
    const lm = createSyntheticLm(TARGET);
    for (let i = 0; i < 24; i++) {
      const temperature = i % 2 === 0 ? 0 : 1;
      const stream = i % 3 === 0;
      const body = { prompt: estimateTokenizer.encode(`Request number ${i} asks for a few words about the sea`), max_tokens: 24, temperature, seed: i, stream };
      const r = await complete(url, body);
      const out = stream ? (r as any[]).filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.text ?? '').join('') : r.choices[0].text;
      const ids = estimateTokenizer.encode(estimateTokenizer.decode(body.prompt) + out).slice(body.prompt.length);
      assert.ok(!ids.includes(BOGUS), `request ${i} emitted the draft's bogus token`);
      if (temperature === 0) {
        const direct = await complete(target.url, { ...body, stream: false });
        assert.equal(out, direct.choices[0].text, `request ${i}`);
      }
      // Each emitted token is one the target gives probability to, after what precedes it.
      const ctx = [...body.prompt];
      for (const t of ids) {
        assert.ok(lm.distribution(ctx).tokens.includes(t), `request ${i}: token ${t} is outside the target's support`);
        ctx.push(t);
      }
    }
    const m = await (await fetch(`${url}/metrics`)).text();
    assert.equal(metricValue(m, 'kvgate_spec_accepted_tokens_total', { model: TARGET, class: 'default' }), 0);
    assert.ok((metricValue(m, 'kvgate_spec_draft_tokens_total', { model: TARGET, class: 'default' }) ?? 0) > 0);
  });
});

describe('failures and cancellation', () => {
  let target: SimWorker;
  let draft: SimWorker;

  before(async () => {
    target = await startTarget(200);
    draft = await startDraft({ fidelity: 0.8, speed: 200 });
  });
  after(async () => {
    await draft.close();
    await target.close();
  });

  for (const mode of ['500', 'reset'] as const) {
    it(`a draft that fails mid-request (${mode}) is replaced by the target alone, without a visible error`, async () => {
      const flaky = await proxy(draft.url, (path, _body, n, res) => {
        if (path !== '/v1/completions' || n <= 3) return false;
        if (mode === '500') {
          res.writeHead(500, { 'content-type': 'application/json' });
          res.end('{"error":{"message":"boom","type":"InternalServerError","param":null,"code":500}}');
        } else {
          res.socket?.destroy();
        }
        return true;
      });
      const c = await startCascade([target.url], [flaky.url], { spec: { probe: false } });
      try {
        for (const stream of [true, false]) {
          const body = { prompt: PROMPT, max_tokens: 60, temperature: 0, stream };
          const r = await fetch(`${c.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: TARGET, ...body }) });
          const text = await r.text();
          assert.equal(r.status, 200, text);
          assert.ok(!text.includes('"error"'), text);
          const got = stream ? parseSse(text).filter((e) => e !== '[DONE]').map((e) => e.choices[0]?.text ?? '').join('') : JSON.parse(text).choices[0].text;
          if (stream) assert.ok(text.endsWith('data: [DONE]\n\n'));
          const direct = await complete(target.url, { prompt: PROMPT, max_tokens: 60, temperature: 0 });
          assert.equal(got, direct.choices[0].text);
        }
        const m = await (await fetch(`${c.url}/metrics`)).text();
        assert.ok((metricValue(m, 'kvgate_spec_fallbacks_total', { model: TARGET, reason: 'draft_error' }) ?? 0) >= 1);
        assert.ok((metricValue(m, 'kvgate_spec_tokens_total', { model: TARGET, source: 'draft' }) ?? 0) > 0, 'the draft served tokens before failing');
      } finally {
        await c.gw.close();
        await flaky.close();
      }
    });
  }

  it('a client that goes away cancels the work of both pools', async () => {
    const slowTarget = await startTarget(2);
    const slowDraft = await startDraft({ fidelity: 0.8, speed: 2 });
    const c = await startCascade([slowTarget.url], [slowDraft.url]);
    try {
      const ac = new AbortController();
      const r = await fetch(`${c.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: TARGET, prompt: PROMPT, max_tokens: 400, temperature: 0, stream: true }),
        signal: ac.signal,
      });
      assert.equal(r.status, 200);
      const reader = r.body!.getReader();
      await reader.read(); // the first chunk: the cascade is running
      // Leave while a call is in flight at one of the workers (nearly all of a round's time).
      await waitFor(() => slowTarget.stats().inFlight + slowDraft.stats().inFlight > 0, 5_000);
      ac.abort();
      await waitFor(() => slowTarget.stats().inFlight === 0 && slowDraft.stats().inFlight === 0, 5_000);
      const before = slowTarget.stats().requests + slowDraft.stats().requests;
      await new Promise((res) => setTimeout(res, 300));
      assert.equal(slowTarget.stats().requests + slowDraft.stats().requests, before, 'no round started after the client left');
      assert.ok(slowTarget.stats().clientAborts + slowDraft.stats().clientAborts >= 1, 'the call in flight was aborted');
      await waitFor(() => c.gw.inflight === 0, 5_000);
      assert.equal(c.gw.router.openCount, 0, 'both picks were released');
    } finally {
      await c.gw.close();
      await slowDraft.close();
      await slowTarget.close();
    }
  });
});

describe('shutdown', () => {
  it('a gateway closing mid-stream ends the cascade with an error event, not a fake clean end', async () => {
    const target = await startTarget(2);
    const draft = await startDraft({ fidelity: 0.8, speed: 2 });
    const c = await startCascade([target.url], [draft.url], { extra: { shutdown: { graceMs: 100 } } });
    try {
      const r = await fetch(`${c.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: TARGET, prompt: PROMPT, max_tokens: 400, temperature: 0, stream: true }),
      });
      const reader = r.body!.getReader();
      const first = await reader.read();
      assert.ok(!first.done);
      const closing = c.gw.close();
      let text = Buffer.from(first.value!).toString('utf8');
      for (;;) {
        const x = await reader.read();
        if (x.done) break;
        text += Buffer.from(x.value).toString('utf8');
      }
      await closing;
      const events = parseSse(text);
      assert.notEqual(events[events.length - 1], '[DONE]');
      assert.equal(events[events.length - 1].error.code, 'shutting_down');
    } finally {
      await c.gw.close();
      await draft.close();
      await target.close();
    }
  });
});

describe('start-up refusal', () => {
  it('refuses target workers that cannot return prompt_logprobs, naming the capability', async () => {
    const target = await startTarget(200);
    const draft = await startDraft({ speed: 200 });
    // An OpenAI-compatible server that ignores prompt_logprobs (as many do).
    const noScores = await proxy(target.url, (path, body, _n, res) => {
      if (path !== '/v1/completions' || body?.prompt_logprobs === undefined) return false;
      const { prompt_logprobs: _p, ...rest } = body;
      void fetch(`${target.url}/v1/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(rest) })
        .then((r) => r.text())
        .then((t) => {
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(t);
        });
      return true;
    });
    const gw = createGateway(cascadeConfig([noScores.url], [draft.url]), { logger: createLogger({ level: 'silent' }) });
    try {
      await assert.rejects(gw.start(), (e: unknown) => {
        assert.ok(e instanceof ConfigError);
        assert.match(e.message, /speculative\.cascades\[0\]\.targetPool: worker t0 of pool 'target' cannot score prompts/);
        assert.match(e.message, /prompt_logprobs/);
        return true;
      });
    } finally {
      await gw.close();
      await noScores.close();
      await draft.close();
      await target.close();
    }
  });

  it('refuses a draft pool with another tokenizer, and a pool nobody answers for', async () => {
    const target = await startTarget(200);
    const draft = await startDraft({ speed: 200 });
    const otherTokenizer = await proxy(draft.url, (path, _body, _n, res) => {
      if (path !== '/tokenize') return false;
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ count: 2, max_model_len: 1000, tokens: [1, 2] }));
      return true;
    });
    try {
      const gw = createGateway(cascadeConfig([target.url], [otherTokenizer.url]), { logger: createLogger({ level: 'silent' }) });
      await assert.rejects(gw.start(), /do not share a tokenizer/);
      await gw.close();
      const gw2 = createGateway(cascadeConfig([target.url], ['http://127.0.0.1:9']), { logger: createLogger({ level: 'silent' }) });
      await assert.rejects(gw2.start(), /draftPool: no worker of pool 'draft' answered the capability probe/);
      await gw2.close();
    } finally {
      await otherTokenizer.close();
      await draft.close();
      await target.close();
    }
  });
});
