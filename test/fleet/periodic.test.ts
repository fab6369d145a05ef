/** PerWorkerLoop: one run per worker per interval, never two at once, the first run counted. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { PerWorkerLoop } from '../../src/fleet/periodic.js';

/** A task that records when each worker's runs start and how many run at once. */
function recorder(runMs: (id: string) => number) {
  const starts = new Map<string, number[]>();
  const inFlight = new Map<string, number>();
  let overlapped = false;
  const t0 = performance.now();
  const task = async (w: { id: string }): Promise<void> => {
    (starts.get(w.id) ?? starts.set(w.id, []).get(w.id)!).push(performance.now() - t0);
    const n = (inFlight.get(w.id) ?? 0) + 1;
    if (n > 1) overlapped = true;
    inFlight.set(w.id, n);
    await sleep(runMs(w.id));
    inFlight.set(w.id, n - 1);
  };
  return {
    task,
    starts,
    get overlapped() {
      return overlapped;
    },
  };
}

test('start() without a first run runs every worker at once, then every interval', async () => {
  const workers = [{ id: 'a' }, { id: 'b' }];
  const r = recorder(() => 1);
  const loop = new PerWorkerLoop(workers, 150, r.task);
  loop.start();
  await sleep(380);
  loop.stop();
  for (const w of workers) {
    const s = r.starts.get(w.id)!;
    assert.ok(s.length >= 2, `${w.id}: ${s.map(Math.round).join(', ')}`);
    assert.ok(s[0]! < 100, `${w.id}'s first run at ${Math.round(s[0]!)} ms`);
  }
});

test('after runOnce(), start() waits an interval from that run, and never runs a worker beside a run still going', async () => {
  // 'quick' answers at once; 'hung' takes 400 ms, longer than the interval (as a worker that does
  // not answer its first scrape within the gateway's bounded wait).
  const workers = [{ id: 'quick' }, { id: 'hung' }];
  const r = recorder((id) => (id === 'hung' ? 400 : 1));
  const loop = new PerWorkerLoop(workers, 250, r.task);
  const first = loop.runOnce();
  await sleep(50); // the gateway's wait ends before the hung worker's run does
  loop.start();
  await sleep(100);
  // Neither worker was run again on start: quick ran 50 ms ago, hung is still running.
  assert.deepEqual([r.starts.get('quick')!.length, r.starts.get('hung')!.length], [1, 1]);
  await first;
  await sleep(250);
  loop.stop();
  const quick = r.starts.get('quick')!;
  const hung = r.starts.get('hung')!;
  // quick: next 250 ms after its first run began; hung: right after its run ended (it overran the interval).
  assert.ok(quick.length >= 2, quick.map(Math.round).join(', '));
  assert.ok(quick[1]! - quick[0]! >= 240, `quick's second run ${Math.round(quick[1]! - quick[0]!)} ms after its first`);
  assert.equal(hung.length, 2, hung.map(Math.round).join(', '));
  assert.ok(hung[1]! - hung[0]! >= 390, `hung's second run ${Math.round(hung[1]! - hung[0]!)} ms after its first`);
  assert.equal(r.overlapped, false);
});

test('a worker removed, or the loop stopped, while its first run is going is not scheduled after it', async () => {
  const workers = [{ id: 'a' }, { id: 'b' }];
  const r = recorder(() => 100);
  const loop = new PerWorkerLoop(workers, 50, r.task);
  const first = loop.runOnce();
  loop.start();
  loop.remove('a');
  await first;
  await sleep(120);
  loop.stop();
  assert.equal(r.starts.get('a')!.length, 1);
  assert.ok(r.starts.get('b')!.length >= 2);

  const r2 = recorder(() => 100);
  const loop2 = new PerWorkerLoop([{ id: 'c' }], 50, r2.task);
  const first2 = loop2.runOnce();
  loop2.start();
  loop2.stop();
  await first2;
  await sleep(120);
  assert.equal(r2.starts.get('c')!.length, 1);
});
