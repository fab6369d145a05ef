import { test } from 'node:test';
import assert from 'node:assert/strict';
import type { WorkerState } from '../../src/fleet/worker-state.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { Router } from '../../src/scheduler/router.js';
import { VirtualClock } from '../../src/util/clock.js';
import { seededRng } from '../../src/util/rng.js';
import type { Policy, RouteOutcome } from '../../src/scheduler/types.js';
import { request, router, seq, worker } from './helpers.js';

/** Always picks `target` with the given expected hit, and logs the hooks it is told about. */
function scripted(hit: number, log: string[], target = 0): Policy {
  return {
    name: 'scripted',
    route: (_req, ws) => ({ ok: true, decision: { worker: ws[target]!, policy: 'scripted', expectedPrefixHit: hit, reason: 'test' } }),
    onDispatch: (req, d) => log.push(`dispatch ${req.id} ${d.worker.id}`),
    onFirstToken: (req, w) => log.push(`first ${req.id} ${w.id}`),
    onComplete: (req, w, ok) => log.push(`complete ${req.id} ${w.id} ${ok}`),
  };
}

const charged = (w: WorkerState) => ({
  inflight: w.inflightCount,
  prefill: w.inflightPrefillTokens,
  blocks: w.inflightBlocks,
  sinceSnapshot: w.dispatchedSinceSnapshot,
});

test('the pick is charged to the worker at once: uncached prompt tokens and the blocks they and the output need', () => {
  const cases: Array<{ prompt: number; maxTokens: number; hit: number; prefill: number; blocks: number }> = [
    { prompt: 1000, maxTokens: 100, hit: 0, prefill: 1000, blocks: Math.ceil(1100 / 16) },
    { prompt: 1000, maxTokens: 100, hit: 0.75, prefill: 250, blocks: Math.ceil(350 / 16) },
    // The output reserved is capped at 1,024 tokens.
    { prompt: 1000, maxTokens: 8000, hit: 0.5, prefill: 500, blocks: Math.ceil(1524 / 16) },
  ];
  for (const c of cases) {
    const log: string[] = [];
    const { router: r } = router(scripted(c.hit, log));
    const w = worker('a');
    const req = request(seq(0, c.prompt), { maxTokens: c.maxTokens });
    const out = r.route(req, [w]);
    assert.ok(out.ok);
    assert.deepEqual(charged(w), { inflight: 1, prefill: c.prefill, blocks: c.blocks, sinceSnapshot: 1 }, JSON.stringify(c));
    assert.equal(r.openCount, 1);
    assert.deepEqual(log, [`dispatch ${req.id} a`]);
  }
});

test('a request of several sequences is charged whole: every prompt of a batch, output for each sequence', () => {
  // The engine reports each sequence as a request: the worker counts them in its queue.
  const cases: Array<{ extra: Record<string, number>; hit: number; prefill: number; blocks: number; sinceSnapshot: number }> = [
    // n = 4 answers to one 1,000-token prompt: one prompt, four outputs.
    { extra: { sequences: 4 }, hit: 0, prefill: 1000, blocks: Math.ceil((1000 + 4 * 100) / 16), sinceSnapshot: 4 },
    // Three prompts of 3,000 tokens in all, two answers each, half of every prompt cached.
    { extra: { sequences: 6, batchPromptTokens: 3000 }, hit: 0.5, prefill: 1500, blocks: Math.ceil((1500 + 6 * 100) / 16), sinceSnapshot: 6 },
  ];
  for (const c of cases) {
    const { router: r } = router(scripted(c.hit, []));
    const w = worker('a');
    const out = r.route(request(seq(0, 1000), { maxTokens: 100, ...c.extra }), [w]);
    assert.ok(out.ok);
    assert.deepEqual(charged(w), { inflight: 1, prefill: c.prefill, blocks: c.blocks, sinceSnapshot: c.sinceSnapshot }, JSON.stringify(c));
    assert.equal(w.inflightSequences, c.sinceSnapshot);
  }
});

test('a policy learns output lengths per sequence: a request of n answers reports their mean', () => {
  const told: Array<number | undefined> = [];
  const policy: Policy = { ...scripted(0, []), onComplete: (_req, _w, _ok, _ctx, out) => told.push(out) };
  const { router: r } = router(policy);
  const w = worker('a');
  const many = request(seq(0, 100), { maxTokens: 100, sequences: 4 });
  const one = request(seq(0, 100), { maxTokens: 100 });
  assert.ok(r.route(many, [w]).ok);
  assert.ok(r.route(one, [w]).ok);
  r.complete(many.id, true, 200);
  r.complete(one.id, true, 70);
  assert.deepEqual(told, [50, 70]);
});

test('a policy hook that throws is reported and leaves the request accounted for: its worker released, nothing open', () => {
  const policy: Policy = {
    ...scripted(0, []),
    onFirstToken: () => {
      throw new Error('first went wrong');
    },
    onComplete: () => {
      throw new Error('complete went wrong');
    },
  };
  const reported: string[] = [];
  const r = new Router({ policy, clock: new VirtualClock(0), rng: seededRng(1), onHookError: (hook, id, e) => reported.push(`${hook} ${id} ${(e as Error).message}`) });
  const w = worker('a');
  const req = request(seq(0, 100), { maxTokens: 10 });
  assert.ok(r.route(req, [w]).ok);
  r.firstToken(req.id);
  assert.equal(w.inflightPrefillTokens, 0, 'the first token was still counted');
  r.complete(req.id, true, 10);
  assert.deepEqual(reported, [`onFirstToken ${req.id} first went wrong`, `onComplete ${req.id} complete went wrong`]);
  assert.deepEqual(charged(w), { inflight: 0, prefill: 0, blocks: 0, sinceSnapshot: 1 });
  assert.equal(r.openCount, 0);
  // Without a reporter (the simulation) the error goes on to the caller, the accounting done first.
  const { router: strict } = router(policy);
  const w2 = worker('b');
  const req2 = request(seq(0, 100), { maxTokens: 10 });
  assert.ok(strict.route(req2, [w2]).ok);
  assert.throws(() => strict.complete(req2.id, true, 10), /complete went wrong/);
  assert.equal(w2.inflightCount, 0);
  assert.equal(strict.openCount, 0);
});

test('the next decision sees the previous pick before any metrics arrive', () => {
  const { router: r } = router(createPolicy('least-load'));
  const ws = ['a', 'b', 'c'].map((id) => worker(id));
  const picks = Array.from({ length: 6 }, (_, i) => {
    const out = r.route(request(seq(i * 100, 50)), ws);
    return out.ok ? out.decision.worker.id : 'refused';
  });
  assert.deepEqual([...picks].sort(), ['a', 'a', 'b', 'b', 'c', 'c']);
});

test('the first token takes the prefill off the worker; completion releases the rest, once', () => {
  const log: string[] = [];
  const { router: r } = router(scripted(0, log));
  const w = worker('a');
  const req = request(seq(0, 320), { maxTokens: 16 });
  r.route(req, [w]);
  r.firstToken(req.id);
  r.firstToken(req.id); // a second report of the same first token changes nothing
  assert.deepEqual(charged(w), { inflight: 1, prefill: 0, blocks: 21, sinceSnapshot: 1 });
  r.complete(req.id, true);
  r.complete(req.id, false);
  r.firstToken(req.id);
  assert.deepEqual(charged(w), { inflight: 0, prefill: 0, blocks: 0, sinceSnapshot: 1 });
  assert.equal(r.openCount, 0);
  assert.deepEqual(log, [`dispatch ${req.id} a`, `first ${req.id} a`, `complete ${req.id} a true`]);
  // A request that ends before its first token releases its prefill too.
  const req2 = request(seq(0, 320));
  r.route(req2, [w]);
  r.complete(req2.id, false);
  assert.deepEqual(charged(w), { inflight: 0, prefill: 0, blocks: 0, sinceSnapshot: 2 });
});

test('a refusal charges nothing; excluded workers are never offered to the policy', () => {
  const offered: string[][] = [];
  const refusing: Policy = {
    name: 'refusing',
    route: (_req, ws): RouteOutcome => {
      offered.push(ws.map((w) => w.id));
      return { ok: false, status: 503, code: 'no_worker_available', message: 'no' };
    },
  };
  const { router: r } = router(refusing);
  const ws = ['a', 'b', 'c'].map((id) => worker(id));
  const out = r.route(request([1, 2, 3]), ws, new Set(['b']));
  assert.ok(!out.ok);
  assert.deepEqual(offered, [['a', 'c']]);
  assert.ok(ws.every((w) => w.inflightCount === 0));
  assert.equal(r.openCount, 0);
  // Nothing left after the exclusions: 503 without asking the policy.
  const none = r.route(request([1]), ws, new Set(['a', 'b', 'c']));
  assert.ok(!none.ok && none.status === 503 && none.message === "no worker serves model 'm'");
  assert.equal(offered.length, 1);
});

test('a streamed answer teaches its worker the time per output token; a non-streamed, failed or one-token answer does not', () => {
  const { router: r, clock } = router(scripted(0, []));
  const w = worker('a');
  const run = (extra: Parameters<typeof request>[1], ok: boolean, out: number) => {
    const req = request(seq(0, 64), { maxTokens: 200, ...extra });
    assert.ok(r.route(req, [w]).ok);
    clock.advance(50);
    r.firstToken(req.id);
    clock.advance(990);
    r.complete(req.id, ok, out);
  };
  run({ stream: false }, true, 100);
  run({}, false, 100);
  run({}, true, 1);
  assert.equal(w.decodeMsPerToken, 0);
  run({}, true, 100); // 990 ms over the 99 tokens after the first
  assert.equal(w.decodeMsPerToken, 10);
});
