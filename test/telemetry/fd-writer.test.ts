/** FdWriter: everything pending goes out in one write, in order; a stalled or broken output never holds or crashes the process. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { spawn } from 'node:child_process';
import { closeSync, mkdtempSync, openSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { FdWriter } from '../../src/telemetry/fd-writer.js';

const drained = (w: FdWriter): Promise<void> => new Promise((r) => w.flush(() => r()));

test('batches reach a file in order; those queued during a write go out together in the next', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-fdw-'));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const file = join(dir, 'out.log');
  const fd = openSync(file, 'w');
  t.after(() => closeSync(fd));
  const w = new FdWriter(fd);
  const expected: string[] = [];
  for (let i = 0; i < 500; i++) {
    const line = `{"n":${i},"pad":"${'x'.repeat(i % 50)}"}\n`;
    expected.push(line);
    assert.equal(w.write(line), true);
  }
  await drained(w);
  assert.equal(readFileSync(file, 'utf8'), expected.join(''));
  // The first write took one batch; the rest had queued behind it and left in very few writes.
  assert.ok(w.writes <= 5, `writes: ${w.writes}`);
  assert.equal(w.dropped, 0);

  w.write('tail\n');
  w.flushSync();
  await drained(w);
  assert.ok(readFileSync(file, 'utf8').endsWith('tail\n'));
});

test('a stalled pipe: writes past the limit are dropped and reported once, the rest arrives once it is read', async (t) => {
  // `cat` reads nothing until its stdout is read; its stdin pipe (non-blocking on our side) fills up.
  const child = spawn('cat', [], { stdio: ['pipe', 'pipe', 'ignore'] });
  t.after(() => child.kill());
  child.stdout.pause();
  const fd = (child.stdin as unknown as { _handle: { fd: number } })._handle.fd;
  const reasons: string[] = [];
  const w = new FdWriter(fd, { maxPendingBytes: 256 * 1024, onFirstDrop: (r) => reasons.push(r) });
  const batch = 'y'.repeat(16 * 1024 - 1) + '\n';
  let accepted = 0;
  const started = Date.now();
  for (let i = 0; i < 64; i++) if (w.write(batch)) accepted++;
  assert.ok(Date.now() - started < 200, 'write() never blocks');
  await new Promise((r) => setTimeout(r, 100));
  assert.ok(accepted < 64 && accepted > 0, `accepted ${accepted}`);
  assert.equal(reasons.length, 1);
  assert.match(reasons[0]!, /waiting to be written/);
  assert.equal(w.dropped, (64 - accepted) * batch.length);

  let got = 0;
  child.stdout.on('data', (d: Buffer) => (got += d.length));
  child.stdout.resume();
  await drained(w);
  await new Promise((r) => setTimeout(r, 100));
  assert.equal(got, accepted * batch.length);
});

test('a failing descriptor drops its batch and the writer goes on', async () => {
  const w = new FdWriter(1_000_000); // not an open descriptor: EBADF
  const reasons: string[] = [];
  const w2 = new FdWriter(1_000_001, { onFirstDrop: (r) => reasons.push(r) });
  w.write('a\n');
  w2.write('b\n');
  w2.write('c\n');
  await Promise.all([drained(w), drained(w2)]);
  assert.equal(w.dropped, 2);
  assert.equal(w2.dropped, 4);
  assert.equal(reasons.length, 1);
  assert.match(reasons[0]!, /log output failed/);
  w2.write('d\n');
  await drained(w2);
  assert.equal(w2.dropped, 6);
});
