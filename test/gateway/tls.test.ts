/**
 * HTTPS on the client side (listen.tls): served with the configured certificate, renewed on a
 * config reload without a restart, refused at start when the files are wrong, and with
 * clientCaFile, only clients holding a certificate of that CA get in.
 */
import assert from 'node:assert/strict';
import { copyFileSync, mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { connect, type PeerCertificate } from 'node:tls';
import { after, test } from 'node:test';
import { Agent, request } from 'undici';
import { ConfigError } from '../../src/config/index.js';
import { createGateway } from '../../src/gateway/gateway.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { configFor, MODEL, startSims } from './helpers.js';

const FIXTURES = new URL('../../../test/fixtures/tls/', import.meta.url).pathname;
const fixture = (name: string) => join(FIXTURES, name);
const ca = readFileSync(fixture('ca.crt'));
const dir = mkdtempSync(join(tmpdir(), 'kvgate-tls-'));
after(() => rmSync(dir, { recursive: true, force: true }));

/** The certificate a new TLS connection to `port` is served. */
function peerCert(port: number, extra: { cert?: Buffer; key?: Buffer } = {}): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const s = connect({ host: '127.0.0.1', port, ca, ...extra }, () => {
      resolve(s.getPeerCertificate());
      s.end();
    });
    s.on('error', reject);
  });
}

test('serves HTTPS with its certificate, and a renewed one after a reload, with no restart', async () => {
  const [w] = await startSims(1);
  const certFile = join(dir, 'tls.crt');
  const keyFile = join(dir, 'tls.key');
  copyFileSync(fixture('server.crt'), certFile);
  copyFileSync(fixture('server.key'), keyFile);
  const config = configFor([w!.url], { listen: { host: '127.0.0.1', port: 0, tls: { certFile, keyFile } } } as never);
  const gw = createGateway(config, { logger: createLogger({ level: 'silent' }) });
  const { url, port } = await gw.start();
  const dispatcher = new Agent({ connect: { ca } });
  try {
    assert.match(url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const r = await request(`${url}/v1/chat/completions`, {
      method: 'POST',
      dispatcher,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: MODEL, max_tokens: 3, stream: true, messages: [{ role: 'user', content: 'hi' }] }),
    });
    assert.equal(r.statusCode, 200);
    assert.match(await r.body.text(), /data: \[DONE\]/);
    const first = await peerCert(port);

    // The files renewed in place, then a reload (SIGHUP): new connections get the new certificate.
    copyFileSync(fixture('server2.crt'), certFile);
    copyFileSync(fixture('server2.key'), keyFile);
    assert.equal((await peerCert(port)).fingerprint256, first.fingerprint256, 'not before the reload');
    gw.reloadConfig(configFor([w!.url], { listen: { host: '127.0.0.1', port: 0, tls: { certFile, keyFile } } } as never));
    const renewed = await peerCert(port);
    assert.notEqual(renewed.fingerprint256, first.fingerprint256);
    // A reload that cannot read them keeps the certificate in use.
    rmSync(keyFile);
    gw.reloadConfig(configFor([w!.url], { listen: { host: '127.0.0.1', port: 0, tls: { certFile, keyFile } } } as never));
    assert.equal((await peerCert(port)).fingerprint256, renewed.fingerprint256);
  } finally {
    await dispatcher.close();
    await gw.close();
    await w!.close();
  }
});

test('a key that cannot be read, or is not the certificate’s, stops the start naming the field', () => {
  const make = (tls: object) => () => createGateway(configFor(['http://127.0.0.1:9'], { listen: { host: '127.0.0.1', port: 0, tls } } as never), { logger: createLogger({ level: 'silent' }) });
  assert.throws(make({ certFile: fixture('server.crt'), keyFile: join(dir, 'missing.key') }), (e: unknown) => e instanceof ConfigError && /^listen\.tls\.keyFile: cannot read .*missing\.key \(ENOENT\)$/.test(e.problems[0]!));
  assert.throws(make({ certFile: fixture('server.crt'), keyFile: fixture('server2.key') }), (e: unknown) => e instanceof ConfigError && /^listen\.tls: .*key/.test(e.problems[0]!));
});

test('with clientCaFile, only a client holding a certificate of that CA gets in', async () => {
  const [w] = await startSims(1);
  const config = configFor([w!.url], {
    listen: { host: '127.0.0.1', port: 0, tls: { certFile: fixture('server.crt'), keyFile: fixture('server.key'), clientCaFile: fixture('ca.crt') } },
  } as never);
  const gw = createGateway(config, { logger: createLogger({ level: 'silent' }) });
  const { url } = await gw.start();
  const withCert = new Agent({ connect: { ca, cert: readFileSync(fixture('client.crt')), key: readFileSync(fixture('client.key')) } });
  const without = new Agent({ connect: { ca } });
  try {
    const ok = await request(`${url}/health`, { dispatcher: withCert });
    assert.equal(ok.statusCode, 200);
    await ok.body.text();
    await assert.rejects(async () => {
      const r = await request(`${url}/health`, { dispatcher: without });
      await r.body.text();
    });
  } finally {
    await withCert.close();
    await without.close();
    await gw.close();
    await w!.close();
  }
});
