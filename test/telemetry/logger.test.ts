import assert from 'node:assert/strict';
import { Writable } from 'node:stream';
import { test } from 'node:test';
import pino from 'pino';
import { createLogger, flatLineWriter, type FlatFields } from '../../src/telemetry/logger.js';

/** A destination that keeps each line it is given. */
function sink(): { stream: Writable; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l !== '') lines.push(l);
      cb();
    },
  });
  return { stream, lines };
}

const RECORDS: FlatFields[] = [
  { id: '3f2b6c1e-8f7a-4b7e-9a57-0e6c2f9d6a11', route: 'chat', tenant: 'default', stream: false, attempts: 1, status: 200, durationMs: 1.25 },
  { id: 'x', clientRequestId: undefined, model: 'a "quoted"\nmodel\u2028', ttftMs: Number.NaN, sampleRate: Number.POSITIVE_INFINITY, cache: 'hit' },
  { 'odd "key"': true, n: -0.5, big: 1e21 },
  {},
];

test('flatLineWriter writes the line pino writes for the same record, fields in order', async () => {
  const ours = sink();
  const theirs = sink();
  const line = flatLineWriter(createLogger({ level: 'info', destination: ours.stream }));
  const reference = pino({ level: 'info', base: undefined }, theirs.stream);
  for (const r of RECORDS) {
    line(r, 'request');
    reference.info(r, 'request');
  }
  await new Promise((r) => setImmediate(r));
  assert.equal(ours.lines.length, RECORDS.length);
  // The time differs by when each was written; everything else is byte for byte the same.
  const untimed = (l: string): string => l.replace(/"time":\d+/, '"time":0');
  assert.deepEqual(ours.lines.map(untimed), theirs.lines.map(untimed));
  for (const l of ours.lines) assert.ok(Math.abs(JSON.parse(l).time - Date.now()) < 5_000);
});

test('flatLineWriter follows the logger level, also when it changes later', async () => {
  const out = sink();
  const logger = createLogger({ level: 'warn', destination: out.stream });
  const line = flatLineWriter(logger);
  line({ a: 1 }, 'request');
  logger.level = 'info';
  line({ a: 2 }, 'request');
  await new Promise((r) => setImmediate(r));
  assert.deepEqual(out.lines.map((l) => JSON.parse(l).a), [2]);
});

test('flatLineWriter goes through logger.info for a logger it did not make (bindings kept)', async () => {
  const out = sink();
  const child = pino({ level: 'info', base: undefined }, out.stream).child({ replica: 'b' });
  flatLineWriter(child)({ a: 1 }, 'request');
  await new Promise((r) => setImmediate(r));
  const l = JSON.parse(out.lines[0]!);
  assert.equal(l.replica, 'b');
  assert.equal(l.a, 1);
  assert.equal(l.msg, 'request');
});
