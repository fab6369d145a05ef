/** The pipeline seam: stages between validation and routing can answer, refuse or rewrite a request. */
import assert from 'node:assert/strict';
import { after, before, test } from 'node:test';
import { ApiError } from '../../src/api/errors.js';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { Pipeline, STAGE_ORDER } from '../../src/gateway/pipeline/stages.js';
import { stateKey } from '../../src/util/state.js';
import { MODEL, post, startGateway, startSims } from './helpers.js';

let sims: SimWorker[];
let gw: Gateway;
let url: string;
const finished: Array<{ id: string; status: number; bytes: number; promptTokens: number }> = [];
const PROMPT_CHARS = stateKey<number>('test.prompt-chars');
/** Same name, different key: must never see PROMPT_CHARS's value. */
const NAMESAKE = stateKey<number>('test.prompt-chars');
const shared: Array<{ id: string; chars: number | undefined; namesake: boolean }> = [];

before(async () => {
  sims = await startSims(1);
  ({ gw, url } = await startGateway(sims.map((s) => s.url)));
  gw.use({
    name: 'refuse-tenant',
    handle(ctx) {
      if (ctx.req.headers['x-tenant'] === 'blocked') {
        throw new ApiError(429, 'overloaded_error', 'rate_limited', 'slow down', null, { 'retry-after': '2' });
      }
      return 'continue';
    },
  });
  gw.use({
    name: 'canned-answer',
    async handle(ctx) {
      if (ctx.routeRequest.promptText.includes('CANNED')) {
        const body = JSON.stringify({ object: 'chat.completion', choices: [{ index: 0, message: { role: 'assistant', content: 'from a stage' } }] });
        ctx.res.writeHead(200, { 'content-type': 'application/json', 'x-from': 'stage' });
        ctx.res.end(body);
        return 'handled';
      }
      return 'continue';
    },
  });
  gw.use({
    name: 'rewrite-and-observe',
    handle(ctx) {
      if (ctx.kind === 'completions') {
        (ctx.body as { max_tokens?: number }).max_tokens = 2;
        ctx.bodyModified = true;
      }
      let bytes = 0;
      ctx.taps.push((c) => (bytes += c.length));
      ctx.onFinish.push((c) => finished.push({ id: c.id, status: c.status, bytes, promptTokens: c.routeRequest.promptTokenCount! }));
      return 'continue';
    },
  });
  gw.use({
    name: 'measure-prompt',
    handle(ctx) {
      ctx.state.set(PROMPT_CHARS, ctx.routeRequest.promptText.length);
      return 'continue';
    },
  });
  gw.use({
    name: 'read-measure',
    handle(ctx) {
      const chars = ctx.state.get(PROMPT_CHARS);
      ctx.onFinish.push((c) => shared.push({ id: c.id, chars, namesake: c.state.has(NAMESAKE) }));
      return 'continue';
    },
  });
});

after(async () => {
  await gw.close();
  await Promise.all(sims.map((s) => s.close()));
});

test('a stage can refuse a request with its own status and headers', async () => {
  const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] }, { 'x-tenant': 'blocked' });
  assert.equal(r.status, 429);
  assert.equal(r.headers.get('retry-after'), '2');
  assert.equal(r.json.error.code, 'rate_limited');
  assert.equal(sims[0]!.stats().requests, 0, 'the worker never saw it');
});

test('a stage can answer a request itself', async () => {
  const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'CANNED please' }] });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('x-from'), 'stage');
  assert.equal(r.json.choices[0].message.content, 'from a stage');
  assert.equal(sims[0]!.stats().requests, 0);
});

test('a stage can rewrite the body (re-serialised) and observe the relayed bytes and the outcome', async () => {
  const r = await post(url + '/v1/completions', { model: MODEL, prompt: 'one two three four', max_tokens: 50 }, { 'x-request-id': 'rw-1' });
  assert.equal(r.status, 200);
  assert.equal(r.json.usage.completion_tokens, 2);
  const f = finished.find((x) => x.id === r.headers.get('x-request-id'));
  assert.ok(f);
  assert.equal(f.status, 200);
  assert.equal(f.bytes, Buffer.byteLength(r.text));
  assert.ok(f.promptTokens > 0);
});

test('stages share typed per-request state, kept apart by key identity', async () => {
  const prompt = 'alpha beta gamma';
  const r = await post(url + '/v1/completions', { model: MODEL, prompt, max_tokens: 2 }, { 'x-request-id': 'st-1' });
  assert.equal(r.status, 200);
  const s = shared.find((x) => x.id === r.headers.get('x-request-id'));
  assert.ok(s);
  assert.equal(s.chars, prompt.length);
  assert.equal(s.namesake, false);
});

test('a tap that throws is dropped; the response it observed still arrives whole', async () => {
  const g = await startGateway(sims.map((s) => s.url));
  try {
    let calls = 0;
    let bytes = 0;
    g.gw.use({
      name: 'taps',
      handle(ctx) {
        ctx.taps.push(() => {
          calls++;
          throw new Error('cache full');
        });
        ctx.taps.push((c) => (bytes += c.length));
        return 'continue';
      },
    });
    const body = { model: MODEL, stream: true, prompt: 'one two three', max_tokens: 8, ignore_eos: true };
    const r = await post(g.url + '/v1/completions', body);
    assert.equal(r.status, 200);
    assert.ok(r.text.endsWith('data: [DONE]\n\n'));
    assert.equal(calls, 1, 'the throwing tap saw only the first chunk');
    assert.equal(bytes, Buffer.byteLength(r.text), 'the other tap saw every byte');
  } finally {
    await g.gw.close();
  }
});

test('with the remote tokenizer the prompt is tokenized by a worker of the model', async () => {
  const g = await startGateway(sims.map((s) => s.url), { tokenizers: { models: { [MODEL]: 'remote' } } });
  try {
    let seen: number[] = [];
    g.gw.use({ name: 'peek', handle: (ctx) => ((seen = Array.from(ctx.routeRequest.promptTokens)), 'continue') });
    const prompt = 'The quick brown fox jumps over the lazy dog';
    const r = await post(g.url + '/v1/completions', { model: MODEL, prompt, max_tokens: 2 });
    assert.equal(r.status, 200);
    const direct = await post(sims[0]!.url + '/tokenize', { model: MODEL, prompt });
    assert.equal(direct.status, 200);
    assert.deepEqual(seen, direct.json.tokens);
  } finally {
    await g.gw.close();
  }
});

test('an early stage runs before tokenization and may answer without it', async () => {
  const g = await startGateway(sims.map((s) => s.url));
  try {
    const order: string[] = [];
    g.gw.use({
      name: 'late',
      handle(ctx) {
        order.push(`late:${ctx.routeRequest.promptTokens.length > 0}`);
        return 'continue';
      },
    });
    g.gw.use({
      name: 'early',
      early: true,
      handle(ctx) {
        order.push(`early:${ctx.routeRequest === undefined}`);
        if ((ctx.body as { user?: string }).user === 'answer-early') {
          ctx.res.writeHead(200, { 'content-type': 'application/json' });
          ctx.res.end('{"early":true}');
          return 'handled';
        }
        return 'continue';
      },
    });
    const r = await post(g.url + '/v1/completions', { model: MODEL, prompt: 'one two', max_tokens: 2 });
    assert.equal(r.status, 200);
    assert.deepEqual(order, ['early:true', 'late:true'], 'early stages run first, before routeRequest exists');
    const e = await post(g.url + '/v1/completions', { model: MODEL, prompt: 'one two', max_tokens: 2, user: 'answer-early' });
    assert.deepEqual(e.json, { early: true });
  } finally {
    await g.gw.close();
  }
});

test('createGateway alone places the configured stages in the one declared order, speculation included', async () => {
  const g = await startGateway(sims.map((s) => s.url), {
    cache: { enabled: true },
    speculative: { routing: { enabled: true }, perRequest: [{ model: MODEL, kMax: 4, draftCost: 0.1 }] },
  });
  try {
    g.gw.use({ name: 'added-late', handle: () => 'continue' });
    g.gw.use({ name: 'added-early', early: true, handle: () => 'continue' });
    assert.deepEqual(g.gw.stageNames(), [
      'response-cache',
      'added-early',
      'admission',
      'response-affinity',
      'speculation-aware-routing',
      'per-request-speculation',
      'added-late',
    ]);
    assert.deepEqual(
      STAGE_ORDER.filter((n) => g.gw.stageNames().includes(n)),
      g.gw.stageNames().filter((n) => !n.startsWith('added-')),
      'the gateway runs its own stages in STAGE_ORDER',
    );
    const r = await post(g.url + '/v1/completions', { model: MODEL, prompt: 'one two', max_tokens: 2 });
    assert.equal(r.status, 200, r.text);
  } finally {
    await g.gw.close();
  }
});

test('a pipeline keeps the declared order whatever order stages are placed in, and refuses one with no place', () => {
  const p = new Pipeline();
  const stage = (name: string, early = false) => ({ name, early, handle: () => 'continue' as const });
  p.place(stage('speculative-cascade'));
  p.add(stage('mine'));
  p.place(stage('admission'));
  p.place(stage('response-cache', true));
  assert.deepEqual(p.names(), ['response-cache', 'admission', 'speculative-cascade', 'mine']);
  assert.deepEqual(p.early.map((s) => s.name), ['response-cache']);
  assert.throws(() => p.place(stage('nowhere')), /no place in STAGE_ORDER/);
  assert.throws(() => p.place(stage('admission')), /placed twice/);
});
