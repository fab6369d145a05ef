/**
 * The admin routes refuse what a page on another site can make a browser send — a "simple"
 * POST with a text/plain or form body, or any request the browser marks as cross-site — in every
 * mode: with no keys configured (where nothing else stands in the way) and with an admin key.
 */
import assert from 'node:assert/strict';
import { request } from 'node:http';
import { test } from 'node:test';
import { startSimWorker } from '../../src/sim/worker/server.js';
import { MODEL, startGateway } from './helpers.js';

/** One request through node:http (every header as given, none added but Host). */
function send(url: string, method: string, headers: Record<string, string>, body?: string): Promise<{ status: number; json: any }> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers: body === undefined ? headers : { ...headers, 'content-length': String(Buffer.byteLength(body)) } }, (res) => {
      const parts: Buffer[] = [];
      res.on('data', (c: Buffer) => parts.push(c));
      res.on('end', () => {
        const text = Buffer.concat(parts).toString('utf8');
        let json: any = null;
        try {
          json = JSON.parse(text);
        } catch {
          // not JSON
        }
        resolve({ status: res.statusCode ?? 0, json });
      });
    });
    req.on('error', reject);
    req.end(body);
  });
}

const ATTACKER = 'https://attacker.example';

for (const mode of ['no keys', 'an admin key'] as const) {
  test(`cross-site requests to the admin routes are refused (${mode}); the same request from a tool or the same origin is served`, async () => {
    const sim = await startSimWorker({ port: 0, model: MODEL, runtimeLoraUpdating: true, speed: 100 });
    const keyed = mode === 'an admin key';
    const { gw, url } = await startGateway([sim.url], keyed ? { admin: { keys: [{ value: 'sk-admin-cross-site' }] } } : {}).catch(async (e: unknown) => {
      await sim.close();
      throw e;
    });
    const auth: Record<string, string> = keyed ? { authorization: 'Bearer sk-admin-cross-site' } : {};
    const host = new URL(url).host;
    const load = JSON.stringify({ name: 'evil-lora', path: '/adapters/evil', pool: 'main' });
    try {
      // Simple POSTs (no preflight): the body types a form can send.
      for (const ct of ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=----x']) {
        const drain = await send(url + '/admin/workers/w0/drain', 'POST', { ...auth, 'content-type': ct }, '{}');
        assert.deepEqual([drain.status, drain.json?.error?.code], [415, 'unsupported_media_type'], ct);
        const adapter = await send(url + '/admin/adapters', 'POST', { ...auth, 'content-type': ct }, load);
        assert.deepEqual([adapter.status, adapter.json?.error?.code], [415, 'unsupported_media_type'], ct);
      }
      // Marked cross-site by the browser, whatever the method and body.
      const crossSite: Array<Record<string, string>> = [
        { 'sec-fetch-site': 'cross-site' },
        { 'sec-fetch-site': 'same-site' },
        { origin: ATTACKER },
        { origin: 'null' },
      ];
      for (const h of crossSite) {
        for (const [method, path] of [['POST', '/admin/workers/w0/drain'], ['DELETE', '/admin/workers/w0/drain'], ['GET', '/admin/workers'], ['DELETE', '/admin/adapters?name=x'], ['GET', '/admin/config'], ['GET', '/dashboard/state']] as const) {
          const r = await send(url + path, method, { ...auth, ...h });
          assert.deepEqual([r.status, r.json?.error?.code], [403, 'cross_site_request'], `${method} ${path} ${JSON.stringify(h)}`);
        }
        const r = await send(url + '/admin/adapters', 'POST', { ...auth, ...h, 'content-type': 'application/json' }, load);
        assert.deepEqual([r.status, r.json?.error?.code], [403, 'cross_site_request'], JSON.stringify(h));
      }
      // Nothing happened.
      assert.equal(gw.registry.get('w0')!.draining, false, 'the worker was not drained');
      assert.equal(gw.registry.forModel('evil-lora'), undefined, 'no adapter was loaded');
      const onWorker = ((await (await fetch(sim.url + '/v1/models')).json()) as { data: Array<{ id: string }> }).data.map((m) => m.id);
      assert.deepEqual(onWorker, [MODEL]);

      // A tool (no Origin, no Sec-Fetch-Site, no body) and the gateway's own origin are served.
      assert.equal((await send(url + '/admin/workers/w0/drain', 'POST', auth)).status, 200);
      assert.equal(gw.registry.get('w0')!.draining, true);
      assert.equal((await send(url + '/admin/workers/w0/drain', 'DELETE', { ...auth, origin: `http://${host}`, 'sec-fetch-site': 'same-origin' })).status, 200);
      assert.equal((await send(url + '/admin/workers', 'GET', { ...auth, 'sec-fetch-site': 'none' })).status, 200);
      const loaded = await send(url + '/admin/adapters', 'POST', { ...auth, 'content-type': 'application/json', origin: `http://${host}` }, load);
      assert.equal(loaded.status, 200, JSON.stringify(loaded.json));
      // Other routes are not affected (CORS governs them).
      assert.equal((await send(url + '/health', 'GET', { origin: ATTACKER, 'sec-fetch-site': 'cross-site' })).status, 200);
    } finally {
      await gw.close();
      await sim.close();
    }
  });
}
