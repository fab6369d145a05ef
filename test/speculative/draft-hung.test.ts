/**
 * A draft worker that hangs (its connections accepted, nothing answered, as under SIGSTOP): the
 * cascade's requests wait for a draft no longer than a deadline derived from k, the draft pool's
 * measured speed and the TPOT budget, then finish on the target alone with the target's exact
 * output; the hung draft worker is suspected and later requests skip it until it answers again.
 */
import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import type { Gateway } from '../../src/gateway/gateway.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { metricValue, parseSse, waitFor } from '../support.js';
import { post, streamText } from '../gateway/helpers.js';
import { TARGET, freezableProxy, startCascade, startDraft, startTarget, type FreezableProxy } from './helpers.js';

const TPOT_BUDGET_MS = 60;
const K = 4;

function chat(content: string, maxTokens: number, stream: boolean) {
  return { model: TARGET, temperature: 0, max_tokens: maxTokens, stream, messages: [{ role: 'user', content }] };
}

function answerText(r: { text: string; json: any }, stream: boolean): string {
  return stream ? streamText(parseSse(r.text)) : r.json.choices[0].message.content;
}

async function metrics(url: string): Promise<string> {
  return (await fetch(`${url}/metrics`)).text();
}

/** A cascade gateway whose one draft worker sits behind a proxy a test can freeze; started before and closed after a describe's tests. */
interface HungDraftFleet {
  target: SimWorker;
  draft: SimWorker;
  proxy: FreezableProxy;
  gw: Gateway;
  url: string;
}

function cascadeBehindFreezableDraft(): HungDraftFleet {
  const fleet = {} as HungDraftFleet;
  before(async () => {
    fleet.target = await startTarget();
    fleet.draft = await startDraft({ fidelity: 0.9 });
    fleet.proxy = await freezableProxy(fleet.draft.url);
    // The default 10 s call timeout stays: a draft call must not wait that long.
    const g = await startCascade([fleet.target.url], [fleet.proxy.url], {
      k: K,
      extra: {
        speculative: {
          cascades: [{ model: TARGET, targetPool: 'target', draftPool: 'draft', k: K }],
          controller: { tpotBudgetMs: TPOT_BUDGET_MS },
        },
      },
    });
    fleet.gw = g.gw;
    fleet.url = g.url;
  });
  after(async () => {
    fleet.proxy.thaw();
    await fleet.gw.close();
    await fleet.proxy.close();
    await fleet.draft.close();
    await fleet.target.close();
  });
  return fleet;
}

describe('a hung draft worker', () => {
  const fleet = cascadeBehindFreezableDraft();

  it('costs a request one draft deadline, not the call timeout; the output is the target’s; later requests skip it until it answers', async () => {
    const { target, proxy, gw, url } = fleet;
    const d0 = gw.registry.get('d0')!;
    // Healthy: requests run the cascade and the draft pool's speed gets measured.
    for (let i = 0; i < 3; i++) {
      const r = await post(`${url}/v1/chat/completions`, chat(`warm-up ${i}: describe a river`, 24, false));
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-kvgate-speculative'), 'cascade', (await metrics(url)).split('\n').filter((l) => l.startsWith('kvgate_spec_requests_total') || l.startsWith('kvgate_worker_suspected')).join('\n'));
    }
    const before = await metrics(url);
    const draftTokensBefore = metricValue(before, 'kvgate_spec_tokens_total', { model: TARGET, source: 'draft' }) ?? 0;
    assert.ok(draftTokensBefore > 0, 'the draft served tokens while healthy');

    proxy.freeze();
    const body = chat('Explain how a hash table works to a new programmer.', 40, true);
    const t0 = performance.now();
    const hung = await post(`${url}/v1/chat/completions`, body);
    const hungMs = performance.now() - t0;
    assert.equal(hung.status, 200, hung.text);
    const direct = await post(`${target.url}/v1/chat/completions`, body);
    assert.equal(answerText(hung, true), answerText(direct, true), 'no token lost or repeated');
    // One draft deadline (at most k × the TPOT budget) and the target's own generation: well
    // under a second on loopback, against the 10 s call timeout.
    assert.ok(hungMs < 3_000, `the request took ${Math.round(hungMs)} ms`);
    // Once it has been silent for outlier.minSilenceMs, a missed deadline suspects it; meanwhile
    // each request loses at most one draft deadline to it.
    for (let i = 0; !d0.suspected; i++) {
      assert.ok(i < 20, 'the hung draft worker was never suspected');
      const b = chat(`meanwhile ${i}: what is a lighthouse`, 12, false);
      const s = performance.now();
      const r = await post(`${url}/v1/chat/completions`, b);
      assert.equal(r.status, 200, r.text);
      assert.ok(performance.now() - s < 3_000, `request ${i} took ${Math.round(performance.now() - s)} ms`);
      assert.equal(answerText(r, false), answerText(await post(`${target.url}/v1/chat/completions`, b), false));
    }
    const m = await metrics(url);
    assert.ok((metricValue(m, 'kvgate_spec_draft_timeouts_total', { model: TARGET, worker: 'd0' }) ?? 0) >= 1);
    assert.ok((metricValue(m, 'kvgate_spec_fallbacks_total', { model: TARGET, reason: 'draft_timeout' }) ?? 0) >= 1);
    assert.ok((metricValue(m, 'kvgate_worker_suspected_total', { worker: 'd0' }) ?? 0) >= 1);

    // Later requests do not wait on it at all: served by the target alone, exactly.
    const later = await Promise.all(
      [0, 1, 2, 3].map(async (i) => {
        const b = chat(`question ${i}: list three reasons the sky looks blue`, 30, i % 2 === 0);
        const s = performance.now();
        const r = await post(`${url}/v1/chat/completions`, b);
        const ms = performance.now() - s;
        assert.equal(r.status, 200, r.text);
        const d = await post(`${target.url}/v1/chat/completions`, b);
        assert.equal(answerText(r, b.stream), answerText(d, b.stream));
        return ms;
      }),
    );
    assert.ok(Math.max(...later) < 3_000, `later requests took ${later.map(Math.round).join(', ')} ms`);
    const m2 = await metrics(url);
    assert.ok((metricValue(m2, 'kvgate_spec_requests_total', { model: TARGET, path: 'plain', reason: 'no_draft_worker' }) ?? 0) >= 4, 'skipped the suspected draft');

    // Answering again (its scrapes succeed) clears the suspicion: the cascade takes it back.
    proxy.thaw();
    await waitFor(() => !d0.suspected, 10_000);
    const back = await post(`${url}/v1/chat/completions`, chat('after: describe a river', 24, false));
    assert.equal(back.status, 200, back.text);
    assert.equal(back.headers.get('x-kvgate-speculative'), 'cascade');
  });

  it('mid-stream: the rest comes from the target at once, with nothing lost or repeated', async () => {
    const { target, proxy, gw, url } = fleet;
    const d0 = gw.registry.get('d0')!;
    await waitFor(() => !d0.suspected && d0.routable, 10_000);
    const timeouts = async () => metricValue(await metrics(url), 'kvgate_spec_fallbacks_total', { model: TARGET, reason: 'draft_timeout' }) ?? 0;
    const timeoutsBefore = await timeouts();
    const body = chat('Write a short story about a lighthouse keeper who finds a message in a bottle.', 160, true);
    // The draft's third call in this request hangs (the first two answer).
    proxy.freezeAt(3, '/v1/completions');
    const t0 = performance.now();
    const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
    assert.equal(res.status, 200);
    assert.equal(res.headers.get('x-kvgate-speculative'), 'cascade');
    const text = await res.text();
    const ms = performance.now() - t0;
    proxy.thaw();
    const events = parseSse(text);
    assert.equal(events.at(-1), '[DONE]');
    const direct = await post(`${target.url}/v1/chat/completions`, body);
    assert.equal(streamText(events), answerText(direct, true), JSON.stringify(events.slice(-4)) + JSON.stringify(parseSse(direct.text).slice(-4)));
    assert.ok(ms < 3_000, `the stream took ${Math.round(ms)} ms`);
    assert.equal(await timeouts(), timeoutsBefore + 1, 'the request dropped its draft for a missed deadline');
  });
});

describe('a draft worker that hangs at any moment of a stream', () => {
  const fleet = cascadeBehindFreezableDraft();

  it('loses nothing: the target-only rest, in whatever chunks it streams, completes the target’s output', async () => {
    const { target, proxy, gw, url } = fleet;
    const d0 = gw.registry.get('d0')!;
    for (let n = 0; n < 6; n++) {
      await waitFor(() => !d0.suspected && d0.routable, 10_000);
      const body = chat(`Write a short story ${n} about a lighthouse keeper.`, 160, true);
      const res = await fetch(`${url}/v1/chat/completions`, { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify(body) });
      const reader = res.body!.getReader();
      const dec = new TextDecoder();
      let text = '';
      // Freeze the draft as the client reads the first event: wherever the cascade is by then.
      while (!text.includes('\n\n')) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
      }
      proxy.freeze();
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        text += dec.decode(value, { stream: true });
      }
      proxy.thaw();
      const direct = await post(`${target.url}/v1/chat/completions`, body);
      assert.equal(streamText(parseSse(text)), answerText(direct, true), `request ${n}`);
    }
  });
});

describe('draft deadlines', () => {
  it('scale with k and the measured speed, within a floor and the TPOT budget', async () => {
    const { DraftDeadlines } = await import('../../src/speculative/draft-deadline.js');
    const d = new DraftDeadlines({ floorMs: 100, factor: 4, callTimeoutMs: 10_000, tpotBudgetMs: null, initialMsPerToken: 10 });
    assert.equal(d.deadlineMs('p', 4), 160);
    assert.equal(d.deadlineMs('p', 1), 100, 'the floor');
    d.observe('p', 4, 400); // 100 ms per token
    assert.equal(d.deadlineMs('p', 4), 1_600);
    d.observe('p', 4, 40_000);
    assert.equal(d.deadlineMs('p', 8), 10_000, 'never past the call timeout');
    const budget = new DraftDeadlines({ floorMs: 250, factor: 4, callTimeoutMs: 10_000, tpotBudgetMs: 50 });
    assert.equal(budget.deadlineMs('p', 4), 200, 'k × the TPOT budget caps the floor too');
    budget.observe('p', 2, 10);
    assert.equal(budget.deadlineMs('p', 2), 100, 'cap k × budget');
    assert.equal(budget.measuredMsPerToken('q'), null);
    const fractional = new DraftDeadlines({ floorMs: 10, factor: 3, callTimeoutMs: 10_000, tpotBudgetMs: null });
    fractional.observe('p', 3, 100);
    assert.equal(fractional.deadlineMs('p', 3), 300);
    fractional.observe('p', 3, 101.3);
    assert.ok(Number.isInteger(fractional.deadlineMs('p', 3)), 'a whole number of ms (AbortSignal.timeout takes no fractions)');
  });
});
