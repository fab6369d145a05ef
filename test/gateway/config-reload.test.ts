/**
 * Configuration hot reload end to end: a real gateway started from a config file, watching it,
 * simulated workers on 127.0.0.1, the file rewritten under it.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, renameSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { Writable } from 'node:stream';
import { after, before, describe, it } from 'node:test';
import { parseConfigText } from '../../src/config/index.js';
import { ConfigWatcher, hashConfigText } from '../../src/gateway/admin/config-watch.js';
import { createGateway, type Gateway } from '../../src/gateway/gateway.js';
import type { KvgatePolicy } from '../../src/scheduler/policies/kvgate/index.js';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { MODEL, metricValue, parseSse, post, startSims, streamText, waitFor } from './helpers.js';

let dir: string;
before(() => {
  dir = mkdtempSync(join(tmpdir(), 'kvgate-reload-'));
});
after(() => rmSync(dir, { recursive: true, force: true }));

const ADMIN = { authorization: 'Bearer sk-admin-00000001' };

/** A config document: these workers, round-robin (so traffic spreads predictably), fast checks. */
function doc(workers: Array<{ id: string; url: string }>, extra: Record<string, unknown> = {}): Record<string, unknown> {
  return {
    listen: { host: '127.0.0.1', port: 0 },
    pools: workers.length > 0 ? [{ name: 'main', model: MODEL, workers }] : [],
    policy: { name: 'round-robin' },
    scrape: { intervalMs: 200 },
    health: { intervalMs: 250, failuresToMarkDown: 3 },
    server: { routingHeaders: true },
    admin: { keys: [{ value: 'sk-admin-00000001' }] },
    reload: { watch: true, debounceMs: 50 },
    log: { level: 'info' },
    ...extra,
  };
}

interface Running {
  gw: Gateway;
  url: string;
  file: string;
  lines: any[];
  watcher: ConfigWatcher;
  /** Replace the file as editors do: write a new file, rename it over the old one. */
  write(d: Record<string, unknown> | string): void;
  close(): Promise<void>;
}

let n = 0;
async function start(d: Record<string, unknown>): Promise<Running> {
  const file = join(dir, `kvgate-${n++}.yaml`);
  const text = JSON.stringify(d, null, 2);
  writeFileSync(file, text);
  const lines: any[] = [];
  const sink = new Writable({
    write(chunk, _enc, cb) {
      for (const l of String(chunk).split('\n')) if (l.trim() !== '') lines.push(JSON.parse(l));
      cb();
    },
  });
  const config = parseConfigText(text, file);
  const gw = createGateway(config, { logger: createLogger({ level: 'info', destination: sink }), configSource: { path: file, hash: hashConfigText(text) } });
  const { url } = await gw.start();
  const watcher = new ConfigWatcher({
    path: file,
    parse: (t) => parseConfigText(t, file),
    gateway: gw,
    logger: gw.logger,
    watch: config.reload.watch,
    debounceMs: config.reload.debounceMs,
    initialHash: hashConfigText(text),
  });
  watcher.start();
  let k = 0;
  return {
    gw,
    url,
    file,
    lines,
    watcher,
    write(next) {
      const tmp = `${file}.tmp${k++}`;
      writeFileSync(tmp, typeof next === 'string' ? next : JSON.stringify(next, null, 2));
      renameSync(tmp, file);
    },
    async close() {
      watcher.close();
      await gw.close();
    },
  };
}

async function adminConfig(url: string): Promise<any> {
  const r = await fetch(`${url}/admin/config`, { headers: ADMIN });
  assert.equal(r.status, 200);
  return r.json();
}

async function waitVersion(url: string, v: number): Promise<any> {
  let c: any;
  await waitFor(async () => (c = await adminConfig(url)).version === v, 10_000);
  return c;
}

const completion = (prompt: string, max = 4) => ({ model: MODEL, prompt, max_tokens: max });

async function workerOf(url: string, prompt: string, headers: Record<string, string> = {}): Promise<string> {
  const r = await post(`${url}/v1/completions`, completion(prompt), { ...ADMIN, ...headers });
  assert.equal(r.status, 200, r.text);
  return r.headers.get('x-kvgate-worker')!;
}

describe('config hot reload', () => {
  let sims: SimWorker[] = [];
  before(async () => {
    sims = await startSims(3, { speed: 100 });
  });
  after(async () => {
    await Promise.all(sims.map((s) => s.close()));
  });

  it('a worker added by rewriting the file is scraped, probed and receives traffic', async () => {
    const r = await start(doc([{ id: 'a', url: sims[0]!.url }]));
    try {
      for (let i = 0; i < 3; i++) assert.equal(await workerOf(r.url, `before ${i}`), 'a');
      r.write(doc([{ id: 'a', url: sims[0]!.url }, { id: 'b', url: sims[1]!.url }]));
      const c = await waitVersion(r.url, 2);
      assert.deepEqual(c.config.workers.map((w: any) => w.id), ['a', 'b']);
      assert.equal(c.fileHash.length, 64);
      const seen = new Set<string>();
      for (let i = 0; i < 6; i++) seen.add(await workerOf(r.url, `after ${i}`));
      assert.deepEqual([...seen].sort(), ['a', 'b']);
      // Watched like the others: its metrics are scraped.
      await waitFor(() => r.gw.registry.get('b')?.snapshot !== null);
      const added = r.lines.find((l) => l.msg === 'worker added');
      assert.equal(added?.worker, 'b');
      assert.deepEqual(r.lines.find((l) => /^config reload applied/.test(l.msg))?.changes, ['workers.b (added)']);
      const m = await (await fetch(`${r.url}/metrics`, { headers: ADMIN })).text();
      assert.equal(metricValue(m, 'kvgate_config_version'), 2);
      assert.equal(metricValue(m, 'kvgate_config_reloads_total', { result: 'applied' }), 1);
    } finally {
      await r.close();
    }
  });

  it('a worker removed while it streams finishes that stream intact; no new request goes there; then its pool is closed', async () => {
    // Real-time speed on the worker that will be removed: 120 tokens take seconds.
    const slow = (await startSims(1, { speed: 1 }))[0]!;
    const r = await start(doc([{ id: 'slow', url: slow.url }, { id: 'b', url: sims[1]!.url }]));
    try {
      // Round-robin: the first request goes to `slow` (the first worker).
      const res = await fetch(`${r.url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json', ...ADMIN },
        body: JSON.stringify({ ...completion('a long story', 120), stream: true, stream_options: { include_usage: true }, ignore_eos: true }),
      });
      assert.equal(res.status, 200);
      assert.equal(res.headers.get('x-kvgate-worker'), 'slow');
      const body = res.text();
      const metricsText = async () => (await fetch(`${r.url}/metrics`, { headers: ADMIN })).text();
      assert.match(await metricsText(), /kvgate_route_decisions_total\{[^}]*worker="slow"/);
      r.write(doc([{ id: 'b', url: sims[1]!.url }]));
      const c = await waitVersion(r.url, 2);
      assert.deepEqual(c.drainingWorkers.map((w: any) => w.id), ['slow'], 'the stream is still running');
      assert.equal(r.gw.registry.get('slow'), undefined);
      for (let i = 0; i < 6; i++) assert.equal(await workerOf(r.url, `next ${i}`), 'b');
      const events = parseSse(await body);
      assert.equal(events.at(-1), '[DONE]');
      assert.ok(!events.some((e) => e !== '[DONE]' && e.error), 'no error event');
      assert.equal(events.at(-2).usage.completion_tokens, 120);
      assert.ok(streamText(events).length > 0);
      // Drained: its connections are closed and it is gone from /admin/config's draining list.
      await waitFor(() => r.lines.some((l) => /^retired worker drained/.test(l.msg) && l.worker === 'slow'));
      // A health probe still running when it was removed did not bring it back.
      assert.ok(!r.lines.some((l) => l.msg === 'worker health' && l.worker === 'slow' && l.healthy === true));
      assert.deepEqual((await adminConfig(r.url)).drainingWorkers, []);
      const workers = (await (await fetch(`${r.url}/admin/workers`, { headers: ADMIN })).json()) as any[];
      assert.deepEqual(workers.map((w) => w.id), ['b']);
      // Its metric series are gone with it; the remaining worker's stay.
      await waitFor(async () => !(await metricsText()).includes('worker="slow"'));
      assert.match(await metricsText(), /kvgate_route_decisions_total\{[^}]*worker="b"/);
    } finally {
      await r.close();
      await slow.close();
    }
  });

  it('a worker whose URL changes under the same id: the old server drains, the new one serves', async () => {
    const r = await start(doc([{ id: 'a', url: sims[0]!.url }]));
    try {
      assert.equal(await workerOf(r.url, 'on the first server'), 'a');
      const before = [sims[0]!.stats().requests, sims[2]!.stats().requests];
      r.write(doc([{ id: 'a', url: sims[2]!.url }]));
      const c = await waitVersion(r.url, 2);
      assert.equal(c.config.workers[0].url, sims[2]!.url);
      for (let i = 0; i < 3; i++) assert.equal(await workerOf(r.url, `moved ${i}`), 'a');
      assert.equal(sims[0]!.stats().requests, before[0], 'nothing more to the old server');
      assert.equal(sims[2]!.stats().requests, before[1]! + 3);
      assert.ok(r.lines.some((l) => l.msg === 'worker changed: the old entry drains'));
      await waitFor(() => r.lines.some((l) => /^retired worker drained/.test(l.msg) && l.worker === 'a'));
      assert.equal(await workerOf(r.url, 'after the drain'), 'a', 'the new entry kept its own connections');
    } finally {
      await r.close();
    }
  });

  it('a worker added with kvEvents (none at start) is subscribed and feeds the prefix index', async () => {
    const ev = await startSimWorker({ port: 0, model: MODEL, speed: 100, kvEvents: { endpoint: 'tcp://127.0.0.1:0' } });
    const r = await start(doc([{ id: 'a', url: sims[0]!.url }], { policy: { name: 'kvgate' } }));
    try {
      r.write(doc([{ id: 'a', url: sims[0]!.url }, { id: 'ev', url: ev.url, kvEvents: { endpoint: ev.kvEventsEndpoint! } } as any], { policy: { name: 'kvgate' } }));
      await waitVersion(r.url, 2);
      const describe = async () => ((await (await fetch(`${r.url}/admin/workers`, { headers: ADMIN })).json()) as any[]).find((w) => w.id === 'ev');
      // Fresh prompts (no prefix draws them anywhere) until the new worker's events fill the index.
      // Sent on while waiting: a publisher's first messages can go out before the subscription
      // has joined (ZeroMQ PUB/SUB), so one request's events alone may never arrive.
      let i = 0;
      let landed = false;
      await waitFor(async () => {
        const system = `Log ${i++}: reply like a ship captain noting the weather, every detail of it. `.repeat(30);
        const x = await post(`${r.url}/v1/chat/completions`, { model: MODEL, messages: [{ role: 'system', content: system }, { role: 'user', content: 'q' }], max_tokens: 2 }, ADMIN);
        if (x.headers.get('x-kvgate-worker') === 'ev') landed = true;
        const d = await describe();
        return landed && d?.kvEvents?.source === 'events' && d.kvEvents.batches > 0 && d.prefixIndex?.blocks > 0;
      }, 15_000).catch(async (e) => {
        throw new Error(`${(e as Error).message}: ${JSON.stringify(await describe())}`);
      });
    } finally {
      await r.close();
      await ev.close();
    }
  });

  it('under steady traffic, workers added and removed by five reloads in a row: no request fails or is cut short', async () => {
    const fleets = [
      [0, 1],
      [0, 1, 2],
      [1, 2],
      [2],
      [0, 2],
      [0, 1],
    ].map((ids) => ids.map((i) => ({ id: `w${i}`, url: sims[i]!.url })));
    const r = await start(doc(fleets[0]!, { policy: { name: 'kvgate' } }));
    try {
      let stop = false;
      const failures: string[] = [];
      let done = 0;
      const client = async (c: number): Promise<void> => {
        for (let k = 0; !stop; k++) {
          const stream = k % 2 === 0;
          const prompt = `client ${c} asks question ${k % 5} about the fleet `.repeat(8);
          const res = await post(`${r.url}/v1/completions`, { ...completion(prompt, 12), stream, ...(stream ? { stream_options: { include_usage: true } } : {}), ignore_eos: true }, ADMIN);
          if (res.status !== 200) failures.push(`${res.status} ${res.text.slice(0, 200)}`);
          else if (stream) {
            const ev = parseSse(res.text);
            if (ev.at(-1) !== '[DONE]' || ev.at(-2)?.usage?.completion_tokens !== 12) failures.push(`stream cut: ${res.text.slice(-200)}`);
          } else if (res.json?.usage?.completion_tokens !== 12) failures.push(`short answer: ${res.text.slice(0, 200)}`);
          done++;
        }
      };
      const clients = [0, 1, 2, 3].map(client);
      for (let v = 1; v < fleets.length; v++) {
        await new Promise((res) => setTimeout(res, 300));
        r.write(doc(fleets[v]!, { policy: { name: 'kvgate' } }));
        await waitVersion(r.url, v + 1);
      }
      await new Promise((res) => setTimeout(res, 300));
      stop = true;
      await Promise.all(clients);
      assert.deepEqual(failures, []);
      assert.ok(done > 20, `${done} requests`);
      assert.deepEqual(r.gw.registry.workers.map((w) => w.id).sort(), ['w0', 'w1']);
      await waitFor(async () => (await adminConfig(r.url)).drainingWorkers.length === 0);
    } finally {
      await r.close();
    }
  });

  it('an invalid file is rejected with one log line naming the field; the old config keeps serving and /admin/config shows the old version and the error', async () => {
    const good = doc([{ id: 'a', url: sims[0]!.url }]);
    const r = await start(good);
    try {
      r.write(doc([{ id: 'a', url: sims[0]!.url }, { id: 'b', url: 'nonsense' }], { admission: { thresholds: { sheddable: 0.5 } } }));
      await waitFor(() => r.lines.some((l) => l.level === 50));
      const errs = r.lines.filter((l) => l.level === 50);
      assert.equal(errs.length, 1);
      assert.match(errs[0].msg, /config reload rejected, keeping version 1: pools\[0\]\.workers\[1\]\.url: Invalid URL/);
      const c = await adminConfig(r.url);
      assert.equal(c.version, 1);
      assert.equal(c.lastRejected.errors[0], 'pools[0].workers[1].url: Invalid URL');
      assert.deepEqual(c.config.workers.map((w: any) => w.id), ['a']);
      assert.equal(c.config.admission.thresholds.sheddable, 0.85, 'nothing of the rejected file was applied');
      assert.equal(await workerOf(r.url, 'still serving'), 'a');
      // Not even YAML, and written in place this time (no rename): rejected the same way.
      writeFileSync(r.file, 'pools: [oops');
      await waitFor(() => r.lines.filter((l) => l.level === 50).length === 2);
      assert.match(r.lines.filter((l) => l.level === 50)[1].msg, /is not valid YAML\/JSON/);
      const m = await (await fetch(`${r.url}/metrics`, { headers: ADMIN })).text();
      assert.equal(metricValue(m, 'kvgate_config_reloads_total', { result: 'rejected' }), 2);
      assert.equal(metricValue(m, 'kvgate_config_version'), 1);
      // Fixed: applied, and the last rejection is still shown.
      r.write({ ...good, log: { level: 'debug' } });
      const c2 = await waitVersion(r.url, 2);
      assert.match(c2.lastRejected.errors[0], /not valid YAML/);
      assert.equal(r.gw.logger.level, 'debug');
    } finally {
      await r.close();
    }
  });

  it('keys, rate limits, aliases, policy weights, thresholds and timeouts take effect; restart-only settings are reported and kept', async () => {
    const tenants = (key: string, rpm: number) => [{ id: 'acme', keys: [{ value: key }], limits: { requestsPerMinute: rpm } }];
    const base = (key: string, rpm: number, extra: Record<string, unknown> = {}) =>
      doc([{ id: 'a', url: sims[0]!.url }, { id: 'b', url: sims[1]!.url }], { policy: { name: 'kvgate', options: { wPrefix: 3 } }, tenants: tenants(key, rpm), ...extra });
    const r = await start(base('sk-acme-old-0001', 2));
    try {
      const ask = (key: string) => post(`${r.url}/v1/completions`, completion('hi'), { authorization: `Bearer ${key}` });
      assert.equal((await ask('sk-acme-old-0001')).status, 200);
      assert.equal((await ask('sk-acme-old-0001')).status, 200);
      assert.equal((await ask('sk-acme-old-0001')).status, 429, 'two requests a minute');
      const alias = (key: string) => post(`${r.url}/v1/completions`, { ...completion('hi'), model: 'gpt-4o-mini' }, { authorization: `Bearer ${key}` });
      assert.equal((await alias('sk-acme-old-0001')).status, 404, 'no alias yet');
      const policy = r.gw.router.policy as KvgatePolicy;
      const index = policy.prefixIndex;
      r.write(
        base('sk-acme-new-0001', 100, {
          policy: { name: 'kvgate', options: { wPrefix: 5, nearRelative: 0.5 } },
          admission: { thresholds: { sheddable: 0.6, standard: 0.7, prefillBacklogTokens: 4096 }, queue: { maxSize: 8 } },
          circuitBreaker: { failuresToOpen: 2, coolDownMs: 500 },
          timeouts: { firstByteMs: 7_000 },
          listen: { host: '127.0.0.1', port: 1 },
          aliases: { 'gpt-4o-mini': MODEL },
        }),
      );
      const c = await waitVersion(r.url, 2);
      assert.equal((await ask('sk-acme-old-0001')).status, 401, 'the old key is gone');
      assert.equal((await ask('sk-acme-new-0001')).status, 200, 'the new key works and the limit was raised');
      assert.equal((await alias('sk-acme-new-0001')).status, 200, 'the alias added by the reload');
      assert.equal(r.gw.router.policy, policy, 'the same policy, retuned in place');
      assert.equal(policy.prefixIndex, index, 'its prefix index is kept');
      assert.equal(policy.params.wPrefix, 5);
      assert.equal(policy.params.nearRelative, 0.5);
      assert.deepEqual(c.config.admission.thresholds, { sheddable: 0.6, standard: 0.7, prefillBacklogTokens: 4096, sheddableTpotMs: 50 });
      assert.equal(c.config.circuitBreaker.failuresToOpen, 2);
      assert.equal(r.gw.registry.breaker('a') !== undefined, true);
      assert.equal(c.config.timeouts.firstByteMs, 7_000);
      // listen.port needs a restart: kept, and said so.
      assert.deepEqual(c.needsRestart, ['listen.port']);
      assert.equal(c.config.listen.port, 0);
      const warn = r.lines.find((l) => l.level === 40 && /needs a restart/.test(l.msg));
      assert.deepEqual(warn?.fields, ['listen.port']);
      // A policy change that cannot be made in place (its index size) is kept back the same way.
      // So is a tenant turning the response cache on when it was built for nobody.
      r.write(
        base('sk-acme-new-0001', 100, {
          policy: { name: 'kvgate', options: { wPrefix: 5, nearRelative: 0.5, indexMaxBytes: 1_000_000 } },
          tenants: [{ id: 'acme', keys: [{ value: 'sk-acme-new-0001' }], cache: { enabled: true } }],
        }),
      );
      const c3 = await waitVersion(r.url, 3);
      assert.deepEqual(c3.needsRestart, ['policy.options.indexMaxBytes', 'tenants[0].cache.enabled']);
      assert.equal(r.gw.router.policy, policy);
    } finally {
      await r.close();
    }
  });

  it('/admin/config needs the admin key and shows no secret', async () => {
    const r = await start(
      doc([{ id: 'a', url: sims[0]!.url, apiKey: { value: 'worker-secret-123' } } as any], {
        tenants: [{ id: 'acme', keys: [{ value: 'sk-acme-secret-01' }] }],
        shared: { redis: { url: 'redis://user:hunter22@127.0.0.1:1' }, rateLimits: false, routing: false },
      }),
    );
    try {
      assert.equal((await fetch(`${r.url}/admin/config`)).status, 401);
      assert.equal((await fetch(`${r.url}/admin/config`, { headers: { authorization: 'Bearer sk-acme-secret-01' } })).status, 403);
      const text = await (await fetch(`${r.url}/admin/config`, { headers: ADMIN })).text();
      for (const secret of ['worker-secret-123', 'sk-acme-secret-01', 'sk-admin-00000001', 'hunter22']) assert.ok(!text.includes(secret), `${secret} shown`);
      const c = JSON.parse(text);
      assert.equal(c.config.tenants[0].keys, 1);
      assert.equal(c.config.admin.keys, 1);
      assert.equal(c.config.workers[0].upstreamHeaders.authorization, '[redacted]');
      assert.equal(c.config.shared.redis.url, 'redis://user:redacted@127.0.0.1:1');
      assert.equal(c.version, 1);
      assert.equal(c.file, r.file);
      assert.equal(c.lastRejected, null);
    } finally {
      await r.close();
    }
  });
});
