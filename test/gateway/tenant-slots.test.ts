/**
 * A tenant's requests count from the moment its key is read: stalled bodies cannot hold more than
 * its concurrentRequests, nor more than its share of the connection budget, and the other
 * tenants are served meanwhile.
 */
import assert from 'node:assert/strict';
import { connect, type Socket } from 'node:net';
import { test } from 'node:test';
import { MODEL, post, startGateway, startSims, waitFor } from './helpers.js';

/** A socket that sends a chat request's headers with `key` and then stalls its body; what it got back. */
function stalledBody(port: number, key: string): { socket: Socket; answer: () => string } {
  let got = '';
  const socket = connect(port, '127.0.0.1', () => {
    socket.write(`POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer ${key}\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"model":`);
  });
  socket.on('data', (c: Buffer) => (got += c.toString('utf8')));
  socket.on('error', () => undefined);
  return { socket, answer: () => got };
}

test('stalled bodies: a tenant is held to its concurrentRequests and to its share of the connections from its key read; other tenants are served', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway([sims[0]!.url], {
    tenants: [
      { id: 'limited', keys: [{ value: 'sk-limited-0001' }], limits: { concurrentRequests: 4 } },
      { id: 'unlimited', keys: [{ value: 'sk-unlimited-01' }] },
      { id: 'bystander', keys: [{ value: 'sk-bystander-01' }] },
    ],
    // A tenant's pending bodies: at most 10 of 40 connections.
    server: { maxConnections: 40, maxConnectionsPerAddress: 40, tenantPendingBodyShare: 0.25, routingHeaders: true },
  } as never);
  const port = Number(new URL(url).port);
  const sockets: Socket[] = [];
  try {
    const limited = Array.from({ length: 12 }, () => stalledBody(port, 'sk-limited-0001'));
    const unlimited = Array.from({ length: 16 }, () => stalledBody(port, 'sk-unlimited-01'));
    sockets.push(...[...limited, ...unlimited].map((s) => s.socket));
    const refusedOf = (xs: Array<{ answer: () => string }>) => xs.filter((x) => x.answer().startsWith('HTTP/1.1 429')).length;
    await waitFor(() => refusedOf(limited) === 8 && refusedOf(unlimited) === 6, 5000);
    assert.deepEqual(gw.tenantSlots.counts('limited'), { inProgress: 4, pendingBodies: 4 });
    assert.deepEqual(gw.tenantSlots.counts('unlimited'), { inProgress: 10, pendingBodies: 10 });
    const refusal = limited.find((x) => x.answer() !== '')!.answer();
    assert.match(refusal, /retry-after: 1/i);
    assert.match(refusal, /connection: close/i);
    const body = JSON.parse(refusal.slice(refusal.indexOf('\r\n\r\n') + 4)) as { error: { type: string; code: string; message: string } };
    assert.deepEqual([body.error.type, body.error.code], ['requests', 'rate_limit_exceeded']);
    assert.match(body.error.message, /at most 4 concurrent requests/);
    const pendingRefusal = unlimited.find((x) => x.answer() !== '')!.answer();
    assert.match(pendingRefusal, /still sending their bodies \(at most 10 at once\)/);
    // The refused connections were closed by the gateway.
    await waitFor(() => gw.connections.open <= 14 + 2, 5000);

    // Another tenant is served, several at once, while the stalled bodies are held.
    const chat = { model: MODEL, max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] };
    const served = await Promise.all(Array.from({ length: 6 }, () => post(url + '/v1/chat/completions', chat, { authorization: 'Bearer sk-bystander-01' })));
    assert.deepEqual(served.map((r) => r.status), [200, 200, 200, 200, 200, 200], served.map((r) => r.text).join('\n'));
    // The limited tenant itself gets nothing more until its stalled bodies are gone.
    assert.equal((await post(url + '/v1/chat/completions', chat, { authorization: 'Bearer sk-limited-0001' })).status, 429);
    for (const s of sockets) s.destroy();
    await waitFor(() => gw.tenantSlots.counts('limited').inProgress === 0 && gw.tenantSlots.counts('unlimited').inProgress === 0, 5000);
    const after = await post(url + '/v1/chat/completions', chat, { authorization: 'Bearer sk-limited-0001' });
    assert.equal(after.status, 200, after.text);
    assert.deepEqual(gw.tenantSlots.counts('limited'), { inProgress: 0, pendingBodies: 0 });
  } finally {
    for (const s of sockets) s.destroy();
    await gw.close();
    for (const s of sims) await s.close();
  }
});
