/**
 * Per-request speculation settings (llama.cpp server's `speculative.n_max`): the pure parts, and
 * end to end through a real gateway in front of a stand-in llama.cpp server on loopback that drafts
 * with a settable acceptance and reports `timings.draft_n` / `draft_n_accepted` as llama.cpp does.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway/gateway.js';
import { alphaFromTimings, chooseRequestK, draftCounts, type PerRequestControl } from '../../src/speculative/per-request.js';
import { expectedTokensPerRound } from '../../src/speculative/acceptance.js';
import { seededRng } from '../../src/util/rng.js';
import { metricValue, parseSse, post, startGateway, startStub } from '../gateway/helpers.js';

const CONTROL: PerRequestControl = { classBy: 'tenant', priorAcceptance: 0.6, minEvidence: 50, minGain: 1.1, probeRate: 0, probeK: 2, busyRunning: 64, busyWaiting: 2 };
const M = { model: 'm', kMax: 16, draftCost: 0.1 };

describe('per-request speculation: choosing n_max and reading timings', () => {
  it('speculates more as acceptance rises, and not at all when it does not pay', () => {
    const rng = seededRng(1);
    const k = (a: number) => chooseRequestK(a, M, CONTROL, rng).k;
    assert.equal(k(0.05), 0);
    assert.ok(k(0.6) >= 1);
    assert.ok(k(0.9) > k(0.6), `${k(0.9)} vs ${k(0.6)}`);
    assert.ok(k(0.99) <= 16);
    // A switched-off class is probed at probeRate with probeK.
    const probing = chooseRequestK(0.05, M, { ...CONTROL, probeRate: 1 }, rng);
    assert.deepEqual(probing, { k: 2, reason: 'probe' });
    // Free drafts: any acceptance pays.
    assert.ok(chooseRequestK(0.2, { ...M, draftCost: 0 }, CONTROL, rng).k > 0);
  });

  it('recovers α from a response’s draft counts', () => {
    for (const a of [0.2, 0.5, 0.7, 0.95]) {
      for (const k of [1, 4, 8]) {
        const rounds = 10;
        const accepted = rounds * (expectedTokensPerRound(a, k) - 1);
        assert.ok(Math.abs(alphaFromTimings(rounds * k, accepted, k)! - a) < 1e-6, `α ${a} k ${k}`);
      }
    }
    assert.equal(alphaFromTimings(0, 0, 4), null);
    assert.ok(alphaFromTimings(8, 0, 4)! < 1e-6);
    assert.ok(alphaFromTimings(8, 8, 4)! > 0.999);
  });

  it('finds the last timings in a JSON body or a stream tail', () => {
    assert.deepEqual(draftCounts('{"choices":[],"timings":{"predicted_n":16,"draft_n":12,"draft_n_accepted":9}}'), { proposed: 12, accepted: 9 });
    const sse = 'data: {"choices":[{"delta":{"content":"a"}}]}\n\ndata: {"choices":[],"timings":{"draft_n": 4, "draft_n_accepted": 1}}\n\ndata: [DONE]\n\n';
    assert.deepEqual(draftCounts(sse), { proposed: 4, accepted: 1 });
    assert.equal(draftCounts('{"choices":[]}'), null);
    assert.equal(draftCounts('{"timings":{"predicted_n":3}}'), null);
  });
});

describe('per-request speculation end to end (stand-in llama.cpp server)', () => {
  const MODEL = 'qwen2.5-32b';
  const OUT = 32;
  /** What the stand-in received, and the acceptance it drafts with. */
  const seen: Array<number | undefined> = [];
  let alpha = 0.9;
  const rng = seededRng(7);
  let stub: Awaited<ReturnType<typeof startStub>>;
  let gw: Gateway;
  let url: string;

  before(async () => {
    stub = await startStub((req, res) => {
      if (req.url === '/health') return void res.end('{}');
      if (req.url !== '/v1/chat/completions') {
        res.statusCode = 404;
        return void res.end();
      }
      let raw = '';
      req.on('data', (d: Buffer) => (raw += d));
      req.on('end', () => {
        const body = JSON.parse(raw) as Record<string, unknown>;
        const k = body['speculative.n_max'] as number | undefined;
        seen.push(k);
        // Draft rounds of k tokens, each token accepted with probability alpha until one fails.
        let made = 0;
        let draftN = 0;
        let accepted = 0;
        while (made < OUT && (k ?? 0) > 0) {
          draftN += k!;
          let j = 0;
          while (j < k! && rng() < alpha) j++;
          accepted += j;
          made += j + 1;
        }
        const timings = { predicted_n: OUT, ...(k ? { draft_n: draftN, draft_n_accepted: accepted } : {}) };
        const base = { id: 'chatcmpl-1', created: 0, model: MODEL };
        if (body.stream === true) {
          res.writeHead(200, { 'content-type': 'text/event-stream' });
          res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: { role: 'assistant', content: 'hello' }, finish_reason: null }] })}\n\n`);
          res.write(`data: ${JSON.stringify({ ...base, object: 'chat.completion.chunk', choices: [{ index: 0, delta: {}, finish_reason: 'length' }], timings })}\n\n`);
          return void res.end('data: [DONE]\n\n');
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(
          JSON.stringify({
            ...base,
            object: 'chat.completion',
            choices: [{ index: 0, message: { role: 'assistant', content: 'hello' }, finish_reason: 'length' }],
            usage: { prompt_tokens: 5, completion_tokens: OUT, total_tokens: 5 + OUT },
            timings,
          }),
        );
      });
    });
    ({ gw, url } = await startGateway([], {
      pools: [{ name: 'llamacpp', model: MODEL, workers: [{ url: stub.url, id: 'l0' }] }],
      speculative: { perRequest: [{ model: MODEL, kMax: 8, draftCost: 0.1 }], controller: { minEvidence: 30, halfLifeTokens: 150, probeRate: 0.1 } },
    }, { speculative: { rng: seededRng(3) } }));
  });

  after(async () => {
    await gw?.close();
    await stub?.close();
  });

  const ask = async (extra: Record<string, unknown> = {}) => {
    const r = await post(url + '/v1/chat/completions', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], max_tokens: OUT, ...extra });
    assert.equal(r.status, 200, r.text);
    return r;
  };
  const alphaMetric = async () => metricValue(await (await fetch(url + '/metrics')).text(), 'kvgate_spec_acceptance_rate', { model: MODEL, class: 'default' });

  it('sends n_max, learns the acceptance from the timings, and lengthens the drafts while it is high', async () => {
    const first = seen.length;
    await ask();
    assert.equal(typeof seen[first], 'number');
    assert.ok(seen[first]! > 0, 'the prior acceptance (0.6) pays');
    for (let i = 0; i < 20; i++) await ask();
    const a = (await alphaMetric())!;
    assert.ok(Math.abs(a - 0.9) < 0.08, `learned α ${a}`);
    assert.ok(seen.at(-1)! >= seen[first]!, `n_max ${seen.at(-1)} after ${seen[first]}`);
    // A stream's timings come in its last chunk.
    const before = metricValue(await (await fetch(url + '/metrics')).text(), 'kvgate_spec_draft_tokens_total', { model: MODEL, class: 'default' })!;
    const s = await ask({ stream: true });
    assert.equal(parseSse(s.text).at(-1), '[DONE]');
    const afterStream = metricValue(await (await fetch(url + '/metrics')).text(), 'kvgate_spec_draft_tokens_total', { model: MODEL, class: 'default' })!;
    assert.ok(afterStream > before);
  });

  it('turns speculation off when acceptance drops, probing now and then', async () => {
    alpha = 0.05;
    for (let i = 0; i < 60; i++) await ask();
    const last = seen.slice(-20);
    assert.ok(last.filter((k) => k === 0).length >= 14, last.join(','));
    assert.ok((await alphaMetric())! < 0.3);
  });

  it('leaves a client’s own n_max alone', async () => {
    await ask({ 'speculative.n_max': 3 });
    assert.equal(seen.at(-1), 3);
  });
});
