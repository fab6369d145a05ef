import { test, type TestContext } from 'node:test';
import assert from 'node:assert/strict';
import { createServer, request, type Server, type ServerResponse } from 'node:http';
import { createServer as createNetServer, connect, Socket, type AddressInfo } from 'node:net';
import { endSoon, flush, holdWrites, holdingWrites, setHoldMode, HOLD_LIMIT_MS } from '../../src/http/write-batch.js';
import { UpstreamPool } from '../../src/http/upstream-pool.js';

const turn = (): Promise<void> => new Promise((r) => setImmediate(r));

/** A TCP server that counts the reads each connection got, and their bytes. */
async function sink(): Promise<{ port: number; reads: () => string[]; close: () => void }> {
  const got: string[] = [];
  const s = createNetServer((c) => c.on('data', (b) => got.push(b.toString())));
  await new Promise<void>((r) => s.listen(0, '127.0.0.1', r));
  return { port: (s.address() as AddressInfo).port, reads: () => got, close: () => s.close() };
}

async function connected(port: number): Promise<Socket> {
  const c = connect(port, '127.0.0.1');
  await new Promise<void>((r) => c.once('connect', () => r()));
  return c;
}

/** Writes held for the test ('always'), and two client sockets connected to one sink. */
async function heldPair(t: TestContext): Promise<{ srv: Awaited<ReturnType<typeof sink>>; a: Socket; b: Socket }> {
  setHoldMode('always');
  t.after(() => setHoldMode('auto'));
  const srv = await sink();
  t.after(() => srv.close());
  const a = await connected(srv.port);
  const b = await connected(srv.port);
  t.after(() => (a.destroy(), b.destroy()));
  return { srv, a, b };
}

test('held writes leave at the end of the turn, all together, and a second hold in the turn is a no-op', async (t) => {
  const { srv, a, b } = await heldPair(t);

  holdWrites(a);
  a.write('one ');
  holdWrites(b);
  b.write('x');
  holdWrites(a); // the same turn: already held
  a.write('two');
  assert.equal(a.writableCorked, 1);
  assert.equal(b.writableCorked, 1);
  assert.ok(a.writableLength > 0, 'nothing left the socket yet');
  await turn();
  assert.equal(a.writableCorked, 0);
  assert.equal(b.writableCorked, 0);
  await new Promise((r) => setTimeout(r, 50));
  // 'one ' and 'two' went out in one write, so the server read them at once.
  assert.ok(srv.reads().includes('one two'), `reads: ${JSON.stringify(srv.reads())}`);
});

test('never (and auto on an idle loop) writes at once', async (t) => {
  const srv = await sink();
  t.after(() => srv.close());
  const a = await connected(srv.port);
  t.after(() => a.destroy());
  for (const m of ['never', 'auto'] as const) {
    setHoldMode(m);
    assert.equal(holdingWrites(), false);
    holdWrites(a);
    assert.equal(a.writableCorked, 0, m);
  }
  setHoldMode('auto');
});

test('a long turn sends what was held once it has waited the hold limit', async (t) => {
  const { a, b } = await heldPair(t);
  holdWrites(a);
  a.write('early');
  const until = performance.now() + HOLD_LIMIT_MS + 1;
  while (performance.now() < until); // the turn goes on
  holdWrites(b); // flushes a's batch first
  assert.equal(a.writableCorked, 0);
  assert.equal(b.writableCorked, 1);
  flush();
});

test('endSoon ends a response at the flush, head and body in one write; destroyed sockets are skipped', async (t) => {
  setHoldMode('always');
  t.after(() => setHoldMode('auto'));
  let pending: ServerResponse | null = null;
  const server: Server = createServer((_req, res) => {
    holdWrites(res.socket);
    res.writeHead(200, { 'content-type': 'text/plain', 'content-length': '5' });
    res.write('hello');
    endSoon(res);
    assert.equal(res.writableEnded, false, 'ended at the flush, not now');
    pending = res;
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => server.close());
  const port = (server.address() as AddressInfo).port;
  const body = await new Promise<string>((resolve, reject) => {
    const req = request({ port, host: '127.0.0.1', path: '/', agent: false }, (res) => {
      let b = '';
      res.on('data', (c) => (b += c));
      res.on('end', () => resolve(b));
    });
    req.on('error', reject);
    req.end();
  });
  assert.equal(body, 'hello');
  assert.equal(pending!.writableEnded, true);

  // A socket destroyed while held is neither uncorked nor written to.
  const srv = await sink();
  t.after(() => srv.close());
  const c = await connected(srv.port);
  holdWrites(c);
  c.write('lost');
  c.destroy();
  flush();
  assert.equal(c.destroyed, true);
});

test('the upstream pool sends a request with the turn, and its answer still arrives', async (t) => {
  setHoldMode('always');
  t.after(() => setHoldMode('auto'));
  const server = createServer((req, res) => {
    let b = '';
    req.on('data', (c) => (b += c));
    req.on('end', () => res.end(`echo ${b}`));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.after(() => server.close());
  const pool = new UpstreamPool(`http://127.0.0.1:${(server.address() as AddressInfo).port}`, { connections: 0, keepAliveTimeoutMs: 1000, connectTimeoutMs: 1000 });
  t.after(() => pool.destroy());
  const answers = await Promise.all(
    ['a', 'b', 'c'].map(
      (x) =>
        new Promise<string>((resolve, reject) => {
          let text = '';
          pool.dispatch(
            { method: 'POST', path: '/', headers: { 'content-type': 'text/plain' }, body: x },
            { onResponseData: (_c, chunk) => (text += chunk.toString()), onResponseEnd: () => resolve(text), onResponseError: (_c, e) => reject(e) },
          );
        }),
    ),
  );
  assert.deepEqual(answers, ['echo a', 'echo b', 'echo c']);
});

test('not holding, the pool still sends a request head and body in one write', async (t) => {
  setHoldMode('never');
  t.after(() => setHoldMode('auto'));
  const srv = createNetServer((c) => c.on('data', () => c.write('HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok')));
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  t.after(() => srv.close());
  const port = (srv.address() as AddressInfo).port;
  // Count what reaches the socket's system calls: one writev of both, or a write each.
  const proto = Socket.prototype as unknown as Record<'_write' | '_writev', (...a: unknown[]) => unknown>;
  const calls: string[] = [];
  for (const m of ['_write', '_writev'] as const) {
    const orig = proto[m];
    proto[m] = function (this: Socket, ...a: unknown[]) {
      if (this.remotePort === port) calls.push(m);
      return orig.apply(this, a);
    };
    t.after(() => (proto[m] = orig));
  }
  const pool = new UpstreamPool(`http://127.0.0.1:${port}`, { connections: 0, keepAliveTimeoutMs: 1000, connectTimeoutMs: 1000 });
  t.after(() => pool.destroy());
  for (let i = 0; i < 3; i++) {
    calls.length = 0;
    await new Promise<void>((resolve, reject) =>
      pool.dispatch({ method: 'POST', path: '/', headers: { 'content-type': 'application/json' }, body: '{"x":1}' }, { onResponseEnd: () => resolve(), onResponseError: (_c, e) => reject(e) }),
    );
    assert.deepEqual(calls, ['_writev'], `request ${i}`);
  }
});
