/** LogBatcher: lines reach the sink in batches by size or age, and nothing is lost on flush. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { LogBatcher, type LineSink } from '../../src/telemetry/log-batcher.js';

function sink() {
  const writes: string[] = [];
  let flushed = 0;
  let flushedSync = 0;
  const s: LineSink = {
    write: (d) => (writes.push(d), true),
    flush: (cb) => (flushed++, cb?.()),
    flushSync: () => void flushedSync++,
  };
  return { s, writes, flushes: () => flushed, syncFlushes: () => flushedSync };
}

test('lines are handed over as one write once the batch holds minBytes, counted in bytes', () => {
  const k = sink();
  const b = new LogBatcher(k.s, { minBytes: 20, flushMs: 10_000 });
  b.write('0123456789\n'); // 11 bytes
  assert.deepEqual(k.writes, []);
  b.write('ééééé\n'); // 6 characters, 11 bytes: 22 in all
  assert.deepEqual(k.writes, ['0123456789\nééééé\n']);
  b.write('x\n');
  assert.equal(k.writes.length, 1, 'a new batch starts');
  b.flushSync();
  assert.deepEqual(k.writes.slice(1), ['x\n']);
  assert.equal(k.syncFlushes(), 1);
});

test('a batch that stays small is handed over after flushMs', async () => {
  const k = sink();
  const b = new LogBatcher(k.s, { minBytes: 1 << 20, flushMs: 20 });
  b.write('a\n');
  b.write('b\n');
  assert.deepEqual(k.writes, []);
  await new Promise((r) => setTimeout(r, 60));
  assert.deepEqual(k.writes, ['a\nb\n']);
  // Nothing pending: no empty write afterwards.
  await new Promise((r) => setTimeout(r, 40));
  assert.equal(k.writes.length, 1);
});

test('flush(cb) hands over what is pending, then asks the sink to write it out', async () => {
  const k = sink();
  const b = new LogBatcher(k.s, { minBytes: 1 << 20, flushMs: 10_000 });
  b.write('pending\n');
  await new Promise<void>((r) => b.flush(() => r()));
  assert.deepEqual(k.writes, ['pending\n']);
  assert.equal(k.flushes(), 1);
});
