/** KV-pressure admission decisions, in virtual time over real WorkerStates. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { AdmissionController, ADMISSION_DEFAULTS, type AdmissionDecision, type AdmissionRequest, type AdmissionTicket, type Refusal } from '../../src/admission/controller.js';
import type { PriorityClass } from '../../src/admission/classes.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { VirtualClock } from '../../src/util/clock.js';

const BS = 16;

function fleet(usages: number[], blocks = 1000) {
  const clock = new VirtualClock(0);
  const workers = usages.map((u, i) => {
    const w = new WorkerState({ id: `w${i}`, url: `sim://w${i}`, pool: 'p', model: 'm', numGpuBlocks: blocks, blockSize: BS });
    w.applySnapshot({ at: 0, kvUsage: u, running: 0, waiting: 0, numGpuBlocks: blocks, blockSize: BS });
    return w;
  });
  const decisions: string[] = [];
  const c = new AdmissionController<WorkerState>({
    settings: { ...ADMISSION_DEFAULTS, queue: { maxSize: 3, maxWaitMs: 1000 } },
    clock,
    staleAfterMs: 5000,
    workersFor: (m) => (m === 'm' ? workers : undefined),
    observer: { decision: (_m, cls, d: AdmissionDecision) => decisions.push(`${cls}:${d}`), waited: () => {} },
  });
  return { clock, workers, c, decisions };
}

let n = 0;
/** A request of `blocks` blocks: prompt (blocks − 1) × 16 tokens, 16 output tokens. */
const req = (cls: PriorityClass, blocks: number, latestStart = Infinity): AdmissionRequest => ({
  id: `r${n++}`,
  model: 'm',
  cls,
  promptTokens: (blocks - 1) * BS,
  maxTokens: BS,
  latestStart,
});

function recorder() {
  const out: { admitted: AdmissionTicket<WorkerState>[]; refused: Refusal[] } = { admitted: [], refused: [] };
  return { out, l: { onAdmit: (t: AdmissionTicket<WorkerState>) => out.admitted.push(t), onRefuse: (r: Refusal) => out.refused.push(r) } };
}

test('per-class thresholds: sheddable shed above 0.85, standard queued above 0.92, critical admitted while a worker fits it', () => {
  const { c } = fleet([0.8, 0.8]); // 1600 of 2000 blocks used
  const { l } = recorder();
  // 40 blocks → 1640/2000 = 0.82: everyone is admitted.
  assert.equal(c.submit(req('sheddable', 40), l).kind, 'admitted');
  // The first request has not reached a worker: its blocks count as pending. 1640 + 80 = 0.86.
  const shed = c.submit(req('sheddable', 80), l);
  assert.equal(shed.kind, 'refused');
  assert.equal(shed.kind === 'refused' && shed.refusal.status, 503);
  assert.equal(shed.kind === 'refused' && shed.refusal.code, 'overloaded');
  assert.equal(c.submit(req('standard', 80), l).kind, 'admitted', '0.86 ≤ 0.92');
  // 1720 + 150 = 0.935 > 0.92: standard waits.
  assert.equal(c.submit(req('standard', 150), l).kind, 'queued');
  // Critical only needs a worker with room: 200 free each, less the 120 pending (which may land
  // anywhere) = 80.
  assert.equal(c.submit(req('critical', 70), l).kind, 'admitted');
  assert.equal(c.submit(req('critical', 100), l).kind, 'queued');
});

test('a burst inside one scrape interval is seen: reservations since the scrape count, and so does output still to come', () => {
  const { c, workers } = fleet([0.5, 0.5]);
  const { l } = recorder();
  let admitted = 0;
  for (let i = 0; i < 20; i++) {
    const r = req('sheddable', 50);
    const s = c.submit(r, l);
    if (s.kind !== 'admitted') break;
    admitted++;
    // The router charges the pick to a worker (as Router.route does): no longer pending.
    const w = s.ticket.workers![i % 2]!;
    w.begin({ id: r.id, promptTokens: r.promptTokens, uncachedTokens: r.promptTokens, maxTokens: r.maxTokens, blocks: 50, dispatchedAt: 0 });
  }
  // 1000 used + 50 per request ≤ 0.85 × 2000 = 1700: 14 requests, not one more.
  assert.equal(admitted, 14);
  assert.ok(Math.abs(c.usage('m') - 1700 / 2000) < 1e-9);
  // A new scrape that shows less than the gateway's own in-flight reservations does not hide them.
  for (const w of workers) w.applySnapshot({ at: 1, kvUsage: 0, running: 0, waiting: 0, numGpuBlocks: 1000, blockSize: BS });
  assert.ok(Math.abs(c.usage('m') - 700 / 2000) < 1e-9, `usage ${c.usage('m')}`);
});

test('a request of several sequences counts output blocks for each: n = 8 is shed where n = 1 passes', () => {
  const { c } = fleet([0.8, 0.8]); // 1600 of 2000 blocks used; sheddable is shed above 1700
  const { l } = recorder();
  // 20 prompt blocks and 64 output tokens (4 blocks) per sequence: 24 blocks alone, 52 with n = 8.
  const big = (sequences?: number): AdmissionRequest => ({ ...req('sheddable', 21), maxTokens: 4 * BS, ...(sequences ? { sequences } : {}) });
  const a = c.submit(big(), l);
  assert.equal(a.kind, 'admitted');
  assert.equal(a.kind === 'admitted' && a.ticket.blocks, 24);
  // 1624 + 20 + 8 × 4 = 1676 fits; with a second such request 1728 does not.
  const b = c.submit(big(8), l);
  assert.equal(b.kind === 'admitted' && b.ticket.blocks, 52);
  assert.equal(c.submit(big(8), l).kind, 'refused');
  assert.equal(c.submit(big(), l).kind, 'admitted', '1676 + 24 = 1700: at the threshold, not above');
});

test('an admitted request’s ticket lists only the workers its blocks fit on', () => {
  const { c } = fleet([0.95, 0.2]);
  const { l } = recorder();
  const s = c.submit(req('critical', 100), l);
  assert.equal(s.kind, 'admitted');
  assert.deepEqual(s.kind === 'admitted' && s.ticket.workers!.map((w) => w.id), ['w1']);
});

test('the queue admits by class then arrival as capacity frees; strict priority at the head', () => {
  const { c, workers, clock, decisions } = fleet([0.95, 0.95], 1000);
  const { out, l } = recorder();
  assert.equal(c.submit(req('standard', 60), l).kind, 'queued');
  assert.equal(c.submit(req('critical', 60), l).kind, 'queued');
  assert.equal(c.submit(req('standard', 10), l).kind, 'queued');
  // A sheddable request never waits, and never overtakes waiting ones.
  assert.equal(c.submit(req('sheddable', 1), l).kind, 'refused');
  // Full, and nothing less important than it waits: refused.
  const full = c.submit(req('standard', 100), l);
  assert.equal(full.kind === 'refused' && full.refusal.status, 429, 'queue bound 3');
  assert.equal(full.kind === 'refused' && full.refusal.code, 'queue_full');
  assert.equal(c.queueDepth('m'), 3);
  c.pump();
  assert.equal(out.admitted.length, 0, 'still no room');
  clock.set(10);
  // A scrape frees room on w0 for the critical request only (60 blocks): the small standard one
  // behind the big standard one must not pass it.
  workers[0]!.applySnapshot({ at: 10, kvUsage: 0.9, running: 0, waiting: 0, numGpuBlocks: 1000, blockSize: BS });
  c.pump();
  assert.deepEqual(out.admitted.map((t) => t.cls), ['critical']);
  assert.equal(out.admitted[0]!.queuedMs, 10);
  workers[1]!.applySnapshot({ at: 10, kvUsage: 0.3, running: 0, waiting: 0, numGpuBlocks: 1000, blockSize: BS });
  c.pump();
  assert.deepEqual(out.admitted.map((t) => t.cls), ['critical', 'standard', 'standard']);
  assert.equal(c.queueDepth(), 0);
  assert.deepEqual(decisions.filter((d) => d.endsWith('dequeued')), ['critical:dequeued', 'standard:dequeued', 'standard:dequeued']);
});

test('a younger request that fits starts ahead of an older one of its class that does not, but not on the worker kept for it', () => {
  const { c, workers, clock, decisions } = fleet([0.5, 0.5, 0.5], 1000);
  const { out, l } = recorder();
  // 600 blocks fit no worker (500 free each): it waits at the head of the standard queue.
  const head = c.submit(req('standard', 600), l);
  assert.equal(head.kind, 'queued');
  // 100 blocks fit everywhere; the head's best worker (w0, the first of equals) is kept for it.
  const small = c.submit(req('standard', 100), l);
  assert.equal(small.kind, 'admitted');
  assert.deepEqual(small.kind === 'admitted' && small.ticket.workers?.map((w) => w.id), ['w1', 'w2']);
  // Only the kept worker has room now: the next one waits behind the head.
  for (const i of [1, 2]) workers[i]!.applySnapshot({ at: 0, kvUsage: 0.95, running: 0, waiting: 0, numGpuBlocks: 1000, blockSize: BS });
  assert.equal(c.submit(req('standard', 100), l).kind, 'queued');
  // A critical request is not a backfill: it is admitted where it fits, w0 included.
  const crit = c.submit(req('critical', 10), l);
  assert.deepEqual(crit.kind === 'admitted' && crit.ticket.workers?.map((w) => w.id), ['w0']);
  // w1 frees room: the queued 100-block request starts there, the head still fits nowhere.
  clock.set(10);
  workers[1]!.applySnapshot({ at: 10, kvUsage: 0.5, running: 0, waiting: 0, numGpuBlocks: 1000, blockSize: BS });
  c.pump();
  assert.equal(out.admitted.length, 1);
  assert.deepEqual(out.admitted[0]!.workers?.map((w) => w.id), ['w1']);
  assert.equal(c.queueDepth('m', 'standard'), 1);
  // w0 frees room for the head: 850 blocks, less the 210 admitted and not yet routed.
  clock.set(20);
  workers[0]!.applySnapshot({ at: 20, kvUsage: 0.15, running: 0, waiting: 0, numGpuBlocks: 1000, blockSize: BS });
  c.pump();
  assert.equal(out.admitted.length, 2);
  assert.equal(out.admitted[1]!.blocks, 600);
  assert.equal(out.admitted[1]!.queuedMs, 20);
  assert.deepEqual(decisions.filter((d) => d.startsWith('standard')), ['standard:queued', 'standard:admitted', 'standard:queued', 'standard:dequeued', 'standard:dequeued']);
});

test('a queued request that cannot start before its deadline is refused with 503 and Retry-After; a cancelled one leaves at once', () => {
  const { c, clock, decisions } = fleet([0.99, 0.99]);
  const { out, l } = recorder();
  const early = c.submit(req('standard', 50, 200), l); // its budget: start by t=200
  const late = c.submit(req('standard', 50), l); // queue.maxWaitMs: by t=1000
  const gone = c.submit(req('critical', 50), l);
  assert.ok(early.kind === 'queued' && late.kind === 'queued' && gone.kind === 'queued');
  assert.equal(c.nextDeadline(), 200);
  c.cancel(gone.entry);
  assert.equal(c.queueDepth('m', 'critical'), 0);
  assert.ok(decisions.includes('critical:cancelled'));
  clock.set(200);
  c.pump();
  assert.equal(out.refused.length, 1);
  assert.deepEqual({ status: out.refused[0]!.status, code: out.refused[0]!.code, ra: out.refused[0]!.retryAfterSeconds }, { status: 503, code: 'queue_timeout', ra: 1 });
  clock.set(1000);
  c.pump();
  assert.equal(out.refused.length, 2);
  assert.equal(c.queueDepth(), 0);
  // Already past its budget on arrival: refused at once.
  const past = c.submit(req('standard', 50, 999), l);
  assert.equal(past.kind === 'refused' && past.refusal.code, 'queue_timeout');
});

test('no routable worker, or a request no worker could ever hold: admitted for the router to answer', () => {
  const { c, workers } = fleet([0.99]);
  const { l } = recorder();
  const huge = c.submit(req('sheddable', 5000), l);
  assert.equal(huge.kind, 'admitted');
  assert.equal(huge.kind === 'admitted' && huge.ticket.workers, null);
  workers[0]!.healthy = false;
  assert.equal(c.submit(req('sheddable', 10), l).kind, 'admitted');
});

test('a request larger than its threshold’s share of the fleet starts alone, on a worker with nothing in flight', () => {
  const { c, workers, clock } = fleet([0], 1000); // standard passes up to 920 blocks, sheddable 850
  const { out, l } = recorder();
  // 930 blocks could never pass 0.92 of this fleet: alone on it, it starts rather than waiting out its deadline.
  const first = c.submit(req('standard', 930), l);
  assert.equal(first.kind, 'admitted');
  assert.deepEqual(first.kind === 'admitted' && first.ticket.workers!.map((w) => w.id), ['w0']);
  const t = first.kind === 'admitted' ? first.ticket : undefined;
  workers[0]!.begin({ id: t!.id, promptTokens: 929 * BS, uncachedTokens: 929 * BS, maxTokens: BS, blocks: 930, dispatchedAt: 0 });
  // Beside a request in flight it waits (standard) or is refused (sheddable)…
  assert.equal(c.submit(req('standard', 930), l).kind, 'queued');
  assert.equal(c.submit(req('sheddable', 900), l).kind, 'refused');
  // …and starts when the worker has emptied.
  workers[0]!.end(t!.id);
  t!.release();
  clock.advance(20);
  workers[0]!.applySnapshot({ at: 20, kvUsage: 0, running: 0, waiting: 0, numGpuBlocks: 1000, blockSize: BS });
  c.pump();
  assert.equal(out.admitted.length, 1);
  assert.equal(out.admitted[0]!.blocks, 930);
});

test('checkPick: a sheddable request is shed when its picked worker has more than one step of prefill waiting before it', () => {
  const { c, workers, decisions } = fleet([0.2, 0.2]);
  const { l } = recorder();
  const limit = ADMISSION_DEFAULTS.thresholds.prefillBacklogTokens;
  const send = (w: WorkerState, id: string, uncached: number) =>
    w.begin({ id, promptTokens: uncached, uncachedTokens: uncached, maxTokens: 16, blocks: Math.ceil(uncached / BS) + 1, dispatchedAt: 0 });
  const ticket = (cls: PriorityClass) => {
    const r = c.submit(req(cls, 4), l);
    assert.equal(r.kind, 'admitted');
    return r.kind === 'admitted' ? r.ticket : null!;
  };
  // w0 has more than the limit waiting for a first token; w1 exactly the limit.
  send(workers[0]!, 'long-a', limit + 1);
  send(workers[1]!, 'long-b', limit);
  // Admission does not narrow on the backlog: both workers stay candidates (a busy worker may
  // hold the request's prefix, and moving it would recompute that prefix elsewhere).
  const t = ticket('sheddable');
  assert.deepEqual(t.workers?.map((w) => w.id), ['w0', 'w1']);
  // The router picked w0 and charged it 40 tokens: the backlog before it is over the limit.
  send(workers[0]!, 'x', 40);
  const refused = c.checkPick(t, workers[0]!, 40);
  assert.equal(refused?.status, 503);
  assert.equal(refused?.code, 'overloaded');
  assert.match(refused?.message ?? '', /8193 prompt tokens waiting for prefill, more than 8192/);
  // On w1 the backlog before it is exactly the limit: it goes on.
  send(workers[1]!, 'y', 40);
  assert.equal(c.checkPick(t, workers[1]!, 40), null);
  // Critical and standard requests are never held back by the backlog.
  assert.equal(c.checkPick(ticket('critical'), workers[0]!, 40), null);
  assert.equal(c.checkPick(ticket('standard'), workers[0]!, 40), null);
  // A first token ends a request's prefill: the worker takes sheddable work again.
  workers[0]!.firstToken('long-a', 10);
  assert.equal(c.checkPick(t, workers[0]!, 40), null);
  assert.equal(decisions.filter((d) => d === 'sheddable:shed_backlog').length, 1);
});

test('prefillBacklogTokens 0 turns the backlog check off', () => {
  const { c, workers } = fleet([0.2]);
  c.retune({ ...ADMISSION_DEFAULTS, thresholds: { ...ADMISSION_DEFAULTS.thresholds, prefillBacklogTokens: 0 } });
  workers[0]!.begin({ id: 'huge', promptTokens: 100_000, uncachedTokens: 100_000, maxTokens: 16, blocks: 2, dispatchedAt: 0 });
  const r = c.submit(req('sheddable', 4), recorder().l);
  assert.equal(r.kind === 'admitted' && c.checkPick(r.ticket, workers[0]!, 0), null);
});

test('a sheddable request is shed where the answers streaming from the picked worker lately took more than thresholds.sheddableTpotMs per token', () => {
  const { c, clock, workers, decisions } = fleet([0.2, 0.2]);
  const ticket = (cls: PriorityClass) => {
    const r = c.submit(req(cls, 4), recorder().l);
    assert.equal(r.kind, 'admitted');
    return r.kind === 'admitted' ? r.ticket : null!;
  };
  // w0's answers: one token every 60 ms for a second; w1's every 20 ms.
  for (let t = 60; t <= 1020; t += 60) workers[0]!.decodePace.observe(60, 1, t);
  for (let t = 20; t <= 1000; t += 20) workers[1]!.decodePace.observe(20, 1, t);
  clock.set(1020);
  const t = ticket('sheddable');
  const refused = c.checkPick(t, workers[0]!, 0);
  assert.equal(refused?.status, 503);
  assert.equal(refused?.code, 'overloaded');
  assert.match(refused?.message ?? '', /take 60\.0 ms per token, more than 50/);
  assert.equal(c.checkPick(t, workers[1]!, 0), null);
  // Critical and standard requests are never held back by it.
  assert.equal(c.checkPick(ticket('critical'), workers[0]!, 0), null);
  assert.equal(c.checkPick(ticket('standard'), workers[0]!, 0), null);
  // Once w0's answers have been quiet for a while there is no figure, and no shedding.
  clock.set(1820);
  assert.equal(workers[0]!.recentTpotMs(1820), undefined);
  assert.equal(c.checkPick(t, workers[0]!, 0), null);
  // 0 turns the check off.
  for (let t = 1880; t <= 2060; t += 60) workers[0]!.decodePace.observe(60, 1, t);
  clock.set(2060);
  assert.equal(c.checkPick(t, workers[0]!, 0)?.status, 503);
  c.retune({ ...ADMISSION_DEFAULTS, thresholds: { ...ADMISSION_DEFAULTS.thresholds, sheddableTpotMs: 0 } });
  assert.equal(c.checkPick(t, workers[0]!, 0), null);
  assert.deepEqual(decisions.filter((d) => d.endsWith('shed_tpot')), ['sheddable:shed_tpot', 'sheddable:shed_tpot']);
});

test('a full queue makes room for a more important request: the newest of the least important class leaves, told 429', () => {
  const { c, decisions } = fleet([0.95, 0.95], 1000);
  const waiting = [recorder(), recorder(), recorder()];
  // Full (bound 3): two standard requests and a critical one (a sheddable request never waits).
  assert.equal(c.submit(req('standard', 60), waiting[0]!.l).kind, 'queued');
  assert.equal(c.submit(req('standard', 60), waiting[1]!.l).kind, 'queued');
  assert.equal(c.submit(req('critical', 60), waiting[2]!.l).kind, 'queued');
  const { out, l } = recorder();
  // A critical arrival: the newest standard request is evicted, answered at once.
  assert.equal(c.submit(req('critical', 60), l).kind, 'queued');
  assert.equal(waiting[0]!.out.refused.length, 0, 'the oldest standard request keeps its place');
  assert.equal(waiting[1]!.out.refused.length, 1);
  const r = waiting[1]!.out.refused[0]!;
  assert.deepEqual([r.status, r.code], [429, 'queue_full']);
  assert.match(r.message, /this standard request was evicted to make room for a critical one/);
  assert.ok(r.retryAfterSeconds >= 1);
  assert.equal(c.queueDepth('m'), 3);
  assert.equal(c.queueDepth('m', 'critical'), 2);
  // Another critical one: the last standard request goes too.
  assert.equal(c.submit(req('critical', 60), l).kind, 'queued');
  assert.equal(waiting[0]!.out.refused.length, 1);
  // Now only critical requests wait: a critical or standard arrival is refused, nobody evicted.
  for (const cls of ['critical', 'standard'] as const) {
    const s = c.submit(req(cls, 60), l);
    assert.equal(s.kind === 'refused' && s.refusal.code, 'queue_full');
  }
  assert.equal(out.refused.length, 0);
  assert.equal(c.queueDepth('m', 'critical'), 3);
  assert.deepEqual(decisions.filter((d) => d.endsWith('evicted')), ['standard:evicted', 'standard:evicted']);
});
