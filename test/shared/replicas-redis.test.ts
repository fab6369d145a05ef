/**
 * Gateway replicas sharing state through a real Redis, end to end: two gateways over the same
 * simulated workers hold a tenant's rate limit together, send a prefix one of them routed to the
 * worker that cached it, and lose no request when Redis is killed mid-test — then share again
 * when it returns. A breaker opened through one replica is honoured by the other within a second.
 */
import assert from 'node:assert/strict';
import { request as httpRequest } from 'node:http';
import { after, before, describe, it } from 'node:test';
import { Redis } from 'ioredis';
import { RateLimiter } from '../../src/admission/rate-limit.js';
import type { Gateway } from '../../src/gateway/gateway.js';
import { RedisLink } from '../../src/shared/redis-link.js';
import { RedisRateLimiter } from '../../src/shared/redis-rate-limit.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { redisSkip, startRedis, type RedisServer } from '../redis-server.js';
import { metricValue, MODEL, post, startGateway, startSims, startStub, waitFor } from '../gateway/helpers.js';

const skip = redisSkip();
const CHAT = '/v1/chat/completions';
const CALM = { health: { intervalMs: 2000, failuresToMarkDown: 10 } };
const ACME = { authorization: 'Bearer sk-acme-0001' };
const GLOBEX = { authorization: 'Bearer sk-globex-01' };
const INITECH = { authorization: 'Bearer sk-initech-1' };
const ADMIN = { authorization: 'Bearer sk-admin-001' };

/** A long prompt (~1,500 tokens) no other test sends. */
function longPrompt(tag: string): string {
  const words: string[] = [];
  for (let i = 0; i < 1500; i++) words.push(`${tag}${(i * 7919) % 1000}`);
  return words.join(' ');
}
const chat = (content: string) => ({ model: MODEL, messages: [{ role: 'user', content }], max_tokens: 4 });

describe('gateway replicas sharing state through Redis', { skip }, () => {
  let redis: RedisServer;
  let sims: SimWorker[];
  let a: { gw: Gateway; url: string };
  let b: { gw: Gateway; url: string };
  let extra: Record<string, unknown>;
  const metric = async (url: string, name: string, labels: Record<string, string> = {}) =>
    metricValue(await (await fetch(url + '/metrics')).text(), name, labels);
  const shared = async (url: string) => (await fetch(url + '/admin/shared', { headers: ADMIN })).json() as Promise<any>;

  before(async () => {
    redis = await startRedis();
    sims = await startSims(4);
    const tenants = [
      { id: 'acme', keys: [{ value: 'sk-acme-0001' }], limits: { requestsPerMinute: 4 } },
      { id: 'globex', keys: [{ value: 'sk-globex-01' }] },
      { id: 'initech', keys: [{ value: 'sk-initech-1' }], limits: { requestsPerMinute: 2 } },
      { id: 'hooli', keys: [{ value: 'sk-hooli-001' }], limits: { tokensPerMinute: 20_000 } },
    ];
    // A generous command timeout: on a loaded test machine a lookup can take longer than the
    // default 100 ms, and a timed-out lookup is (rightly) treated as "not known", which these
    // tests of what is shared would read as a failure. Redis stopped still fails at once.
    extra = { ...CALM, tenants, admin: { keys: [{ value: 'sk-admin-001' }] }, shared: { redis: { url: redis.url, keyPrefix: 'kvs:', timeoutMs: 2_000 }, publishIntervalMs: 10 } };
    a = await startGateway(sims.map((s) => s.url), extra as never);
    b = await startGateway(sims.map((s) => s.url), extra as never);
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 1 && (await metric(b.url, 'kvgate_shared_redis_up')) === 1);
  });
  after(async () => {
    await a?.gw.close();
    await b?.gw.close();
    await Promise.all((sims ?? []).map((s) => s.close()));
    await redis?.stop();
  });

  /** Send `prompt` through A, then through B: the worker each chose and B's cached prompt tokens. */
  async function aThenB(prompt: string): Promise<{ wa: string; wb: string; cachedB: number; promptTokens: number }> {
    const before = (await shared(b.url)).routing.received;
    const ra = await post(a.url + CHAT, chat(prompt), GLOBEX);
    assert.equal(ra.status, 200, ra.text);
    // A's prediction and confirmation reach B's index (published every 10 ms).
    await waitFor(async () => (await shared(b.url)).routing.received >= before + 2);
    const rb = await post(b.url + CHAT, chat(prompt), GLOBEX);
    assert.equal(rb.status, 200, rb.text);
    return {
      wa: ra.headers.get('x-kvgate-worker')!,
      wb: rb.headers.get('x-kvgate-worker')!,
      cachedB: rb.json.usage.prompt_tokens_details.cached_tokens,
      promptTokens: rb.json.usage.prompt_tokens,
    };
  }

  it("holds a tenant's rate limit across replicas", async () => {
    const statuses: number[] = [];
    for (const g of [a, b, a, b, a, b]) statuses.push((await post(g.url + CHAT, chat('hi'), ACME)).status);
    // 4 requests a minute for the tenant, whichever replica takes them.
    assert.deepEqual(statuses, [200, 200, 200, 200, 429, 429]);
    const refused = await post(b.url + CHAT, chat('hi'), ACME);
    assert.equal(refused.json.error.code, 'rate_limit_exceeded');
    assert.equal(refused.headers.get('x-ratelimit-remaining-requests'), '0');
    assert.ok(Number(refused.headers.get('retry-after')) >= 1);
    assert.equal(await metric(a.url, 'kvgate_shared_rate_limit_checks_total', { store: 'local' }), 0);
  });

  it("settles a tenant's token reservations in the shared bucket, whichever replica served them", async () => {
    const h = { authorization: 'Bearer sk-hooli-001' };
    // No max_tokens: 8,192 reserved per request; two such reservations standing would leave no
    // room for a third in 20,000 a minute.
    const body = { model: MODEL, messages: [{ role: 'user', content: 'Say hello.' }] };
    const left: number[] = [];
    const raw = new Redis(redis.url).on('error', () => undefined);
    try {
      for (const g of [a, b, a, b, a]) {
        const r = await post(g.url + CHAT, body, h);
        assert.equal(r.status, 200, r.text);
        left.push(Number(r.headers.get('x-ratelimit-remaining-tokens')));
        // The settlement is sent after the answer: let it land before the next reservation.
        await waitFor(async () => Number(await raw.hget('kvs:rl:{hooli}:tok', 'l')) > 19_000);
      }
    } finally {
      raw.disconnect();
    }
    assert.ok(left.every((x) => x > 20_000 - 8192 - 300 && x < 20_000 - 8192), `remaining ${left.join(', ')}`);
  });

  it('drains a worker through replica A in every replica, and puts it back through replica B', async () => {
    const draining = async (url: string, id: string) =>
      ((await (await fetch(url + '/admin/workers', { headers: ADMIN })).json()) as Array<{ id: string; draining: boolean }>).find((w) => w.id === id)!.draining;
    assert.equal((await fetch(a.url + '/admin/workers/w3/drain', { method: 'POST', headers: ADMIN })).status, 200);
    await waitFor(async () => await draining(b.url, 'w3'), 3_000);
    for (let i = 0; i < 8; i++) {
      const r = await post(b.url + CHAT, chat(`drained ${i} ${'q'.repeat(i * 20)}`), GLOBEX);
      assert.equal(r.status, 200, r.text);
      assert.notEqual(r.headers.get('x-kvgate-worker'), 'w3');
    }
    assert.deepEqual((await shared(b.url)).drains.draining, ['w3']);
    assert.equal((await fetch(b.url + '/admin/workers/w3/drain', { method: 'DELETE', headers: ADMIN })).status, 200);
    await waitFor(async () => !(await draining(a.url, 'w3')), 3_000);
    assert.equal(await draining(b.url, 'w3'), false);
  });

  it('sends a prompt routed through replica A to the same worker through replica B, which hits its prefix cache', async () => {
    for (const tag of ['alpha', 'bravo', 'charlie']) {
      const r = await aThenB(longPrompt(tag));
      assert.equal(r.wb, r.wa, `${tag}: B routed to ${r.wb}, A to ${r.wa}`);
      // By the worker's own count: all but the last partial block served from its cache.
      assert.ok(r.cachedB >= r.promptTokens - 32, `${tag}: ${r.cachedB} of ${r.promptTokens} prompt tokens cached`);
    }
    assert.ok((await metric(a.url, 'kvgate_shared_routing_blocks_total', { direction: 'published' }))! > 0);
  });

  it("counts replica A's requests in flight in replica B's view of the workers while they run", async () => {
    const inflightAt = async (url: string) =>
      ((await (await fetch(url + '/admin/workers', { headers: ADMIN })).json()) as Array<{ id: string; inflight: number }>).reduce((n, w) => n + w.inflight, 0);
    assert.equal(await inflightAt(b.url), 0);
    const res = await fetch(a.url + CHAT, {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...GLOBEX },
      body: JSON.stringify({ model: MODEL, messages: [{ role: 'user', content: 'a long answer' }], max_tokens: 3000, ignore_eos: true, stream: true }),
    });
    assert.equal(res.status, 200);
    // B sent nothing, yet sees A's stream at its worker (mirrored, not counted as routed by B).
    await waitFor(async () => (await inflightAt(b.url)) === 1, 5_000);
    assert.ok((await shared(b.url)).load.mirrored >= 1);
    await res.text();
    await waitFor(async () => (await inflightAt(b.url)) === 0, 5_000);
  });

  it('continues a Responses API response through replica B at the worker that wrote it through replica A', async () => {
    const ask = (url: string, body: Record<string, unknown>) => post(url + '/v1/responses', { model: MODEL, max_output_tokens: 2, ...body }, GLOBEX);
    for (let i = 0; i < 4; i++) {
      const first = await ask(a.url, { input: `Begin story ${i}.` });
      assert.equal(first.status, 200, first.text);
      const home = first.headers.get('x-kvgate-worker');
      // A writes the id to Redis as the answer's first bytes pass (before the client has them);
      // on a test process loaded by the whole suite the write's acknowledgement can trail the
      // answer, so wait for it: what is tested is that B finds what A wrote.
      await waitFor(async () => (await shared(a.url)).responses.stored >= i + 1, 5_000);
      // Distinct long inputs: without the pin, B would spread them.
      const next = await ask(b.url, { input: longPrompt(`cont${i}`), previous_response_id: first.json.id });
      assert.equal(next.status, 200, next.text);
      const got = next.headers.get('x-kvgate-worker');
      if (got !== home) {
        assert.fail(`continuation ${i}: ${got}, not ${home}; B's directory lookups ${JSON.stringify((await shared(b.url)).responses)}, A's ${JSON.stringify((await shared(a.url)).responses)}`);
      }
    }
    const st = (await shared(b.url)).responses;
    assert.ok(st.found >= 4, JSON.stringify(st));
    assert.ok((await shared(a.url)).responses.stored >= 4);
  });

  it("refuses another tenant's continuation through any replica: 404 with the owner on record, 503 while Redis is down; a restarted replica still serves the owner", async () => {
    const HOOLI = { authorization: 'Bearer sk-hooli-001' };
    const ask = (url: string, body: Record<string, unknown>, who: Record<string, string>) =>
      post(url + '/v1/responses', { model: MODEL, input: 'Go on.', max_output_tokens: 2, ...body }, who);
    const made: string[] = [];
    for (let i = 0; i < 2; i++) {
      const before = (await shared(a.url)).responses.stored;
      const r = await ask(a.url, { input: `Owner's story ${i}.` }, GLOBEX);
      assert.equal(r.status, 200, r.text);
      made.push(r.json.id);
      await waitFor(async () => (await shared(a.url)).responses.stored > before, 5_000);
    }
    const stolen = await ask(b.url, { previous_response_id: made[0] }, HOOLI);
    assert.equal(stolen.status, 404, stolen.text);
    assert.equal(stolen.json.error.code, 'response_not_found');
    // Replica B restarts: the owners are in Redis, not only in its memory.
    await b.gw.close();
    b = await startGateway(sims.map((s) => s.url), extra as never);
    await waitFor(async () => (await metric(b.url, 'kvgate_shared_redis_up')) === 1);
    assert.equal((await ask(b.url, { previous_response_id: made[0] }, GLOBEX)).status, 200);
    assert.equal((await ask(b.url, { previous_response_id: made[0] }, HOOLI)).status, 404);
    // Redis down: B cannot check who owns the response it has not seen, and says so.
    await redis.stop();
    try {
      await waitFor(async () => (await metric(b.url, 'kvgate_shared_redis_up')) === 0);
      for (const who of [HOOLI, GLOBEX]) {
        const r = await ask(b.url, { previous_response_id: made[1] }, who);
        assert.equal(r.status, 503, r.text);
        assert.deepEqual([r.json.error.code, r.json.error.param], ['response_directory_unavailable', 'previous_response_id']);
        assert.equal(r.headers.get('retry-after'), '1');
      }
      // What B saw itself it still checks alone.
      assert.equal((await ask(b.url, { previous_response_id: made[0] }, HOOLI)).status, 404);
      assert.equal((await ask(b.url, { previous_response_id: made[0] }, GLOBEX)).status, 200);
      const lookup = await fetch(`${b.url}/v1/responses/${made[1]}`, { headers: GLOBEX });
      assert.equal(lookup.status, 503);
    } finally {
      await redis.start();
      await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 1 && (await metric(b.url, 'kvgate_shared_redis_up')) === 1, 10_000);
    }
  });

  it('loses no request while Redis is down, shows it, and shares again when it returns', async () => {
    await redis.stop();
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 0 && (await metric(b.url, 'kvgate_shared_redis_up')) === 0);
    assert.equal((await shared(a.url)).up, false);
    const statuses: number[] = [];
    for (let i = 0; i < 6; i++) {
      const g = i % 2 === 0 ? a : b;
      statuses.push((await post(g.url + CHAT, chat(`while down ${i}`), GLOBEX)).status);
      // A limited tenant is counted by the replica alone meanwhile (2 a minute each).
      statuses.push((await post(g.url + CHAT, chat(`limited while down ${i}`), INITECH)).status);
    }
    assert.deepEqual(statuses.filter((s) => s !== 200 && s !== 429), [], `statuses ${statuses}`);
    assert.equal(statuses.filter((s) => s === 200).length, 6 + 4, `statuses ${statuses}`);
    assert.ok((await metric(a.url, 'kvgate_shared_rate_limit_checks_total', { store: 'local' }))! >= 2);

    await redis.start();
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 1 && (await metric(b.url, 'kvgate_shared_redis_up')) === 1);
    assert.ok((await metric(a.url, 'kvgate_shared_redis_reconnects_total'))! >= 1);
    // The subscriber re-subscribes on its own: wait until A's knowledge reaches B again.
    let probe = 0;
    await waitFor(async () => {
      const seen = (await shared(b.url)).routing.messagesReceived as number;
      await post(a.url + CHAT, chat(`probe ${probe++}`), GLOBEX);
      await new Promise((r) => setTimeout(r, 100));
      return (await shared(b.url)).routing.messagesReceived > seen;
    });
    const r = await aThenB(longPrompt('delta'));
    assert.equal(r.wb, r.wa);
    assert.ok(r.cachedB >= r.promptTokens - 32);
    // Rate limits are shared again (Redis came back empty: a fresh minute).
    const again: number[] = [];
    for (const g of [a, b, a]) again.push((await post(g.url + CHAT, chat('again'), INITECH)).status);
    assert.deepEqual(again, [200, 200, 429]);
  });
});

/**
 * A simulated worker behind a switch: passes everything through to `target`, or — while `failing`
 * — answers its generation routes 500. `attempts` counts generation requests that reached it.
 */
async function faultyWorker(target: string) {
  const t = new URL(target);
  const state = { failing: false, attempts: 0 };
  const stub = await startStub((req, res) => {
    if (req.url?.startsWith('/v1/')) {
      state.attempts++;
      if (state.failing) {
        req.resume();
        res.writeHead(500, { 'content-type': 'application/json' });
        res.end('{"error":{"message":"injected fault","type":"server_error","param":null,"code":null}}');
        return;
      }
    }
    const up = httpRequest({ host: t.hostname, port: t.port, path: req.url, method: req.method, headers: req.headers }, (r) => {
      res.writeHead(r.statusCode ?? 502, r.headers);
      r.pipe(res);
    });
    up.on('error', () => res.destroy());
    req.pipe(up);
  });
  return Object.assign(state, { url: stub.url, close: () => stub.close() });
}

describe('gateway replicas sharing circuit breakers through Redis', { skip }, () => {
  const COOL_DOWN = 4_000;
  let redis: RedisServer;
  let sims: SimWorker[];
  let bad: Awaited<ReturnType<typeof faultyWorker>>;
  let extra: Record<string, unknown>;
  let a: { gw: Gateway; url: string };
  let b: { gw: Gateway; url: string };
  const metric = async (url: string, name: string, labels: Record<string, string> = {}) =>
    metricValue(await (await fetch(url + '/metrics')).text(), name, labels);
  const state = async (url: string, worker: string) =>
    ((await (await fetch(url + '/admin/workers', { headers: ADMIN })).json()) as any[]).find((w) => w.id === worker).circuitState as string;
  const shared = async (url: string) => (await fetch(url + '/admin/shared', { headers: ADMIN })).json() as Promise<any>;

  before(async () => {
    redis = await startRedis();
    sims = await startSims(2);
    bad = await faultyWorker(sims[1]!.url);
    extra = {
      ...CALM,
      policy: { name: 'round-robin' },
      circuitBreaker: { failuresToOpen: 2, coolDownMs: COOL_DOWN },
      outlier: { enabled: false },
      admin: { keys: [{ value: 'sk-admin-001' }] },
      shared: { redis: { url: redis.url, keyPrefix: 'kvb:' } },
    };
    // w0: a healthy worker; w1: the worker behind the switch. Same ids and URLs in both replicas.
    a = await startGateway([sims[0]!.url, bad.url], extra as never);
    b = await startGateway([sims[0]!.url, bad.url], extra as never);
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 1 && (await metric(b.url, 'kvgate_shared_redis_up')) === 1);
  });
  after(async () => {
    await a?.gw.close();
    await b?.gw.close();
    await bad?.close();
    await Promise.all((sims ?? []).map((s) => s.close()));
    await redis?.stop();
  });

  /** Send through `g` until its breaker for w1 is in `want`; every request must succeed (retried on w0). */
  async function drive(g: { url: string }, want: string, tag: string): Promise<void> {
    for (let i = 0; i < 20 && (await state(g.url, 'w1')) !== want; i++) {
      const r = await post(g.url + CHAT, chat(`${tag} ${i}`));
      assert.equal(r.status, 200, r.text);
    }
    assert.equal(await state(g.url, 'w1'), want);
  }

  it('a breaker opened through replica A keeps replica B away from the worker within a second', async () => {
    // Both replicas use w1 while it works.
    for (const g of [a, b]) for (let i = 0; i < 2; i++) assert.equal((await post(g.url + CHAT, chat(`warm ${i}`))).status, 200);
    assert.ok(sims[1]!.stats().requests >= 2);

    bad.failing = true;
    await drive(a, 'open', 'fail via A');
    const opened = Date.now();
    // B learns it by pub/sub: poll its own view.
    await waitFor(async () => (await state(b.url, 'w1')) === 'open', 1_000);
    const propagation = Date.now() - opened;
    assert.ok(propagation < 1_000, `B saw the opening after ${propagation} ms`);
    assert.equal(await metric(b.url, 'kvgate_shared_breaker_transitions_total', { outcome: 'opened' }), 1);
    assert.equal(await metric(a.url, 'kvgate_shared_breaker_transitions_total', { outcome: 'published' }), 1);
    assert.ok((await shared(b.url)).breakers.open.w1 > 0, '/admin/shared lists it with the cool-down left');

    // B, round-robin over two workers, sends nothing to w1 while the breaker is open: by the
    // worker's own door count, every request lands on w0.
    const attempts = bad.attempts;
    const w0Before = sims[0]!.stats().requests;
    for (let i = 0; i < 8; i++) {
      const r = await post(b.url + CHAT, chat(`via B ${i}`));
      assert.equal(r.status, 200, r.text);
      assert.equal(r.headers.get('x-kvgate-worker'), 'w0');
    }
    assert.equal(bad.attempts, attempts, 'B sent no request to the worker A found broken');
    assert.equal(sims[0]!.stats().requests - w0Before, 8);
    // A replica started now reads the breakers already open from Redis.
    const c = await startGateway([sims[0]!.url, bad.url], extra as never);
    try {
      await waitFor(async () => (await state(c.url, 'w1')) === 'open', 1_000);
    } finally {
      await c.gw.close();
    }
    assert.ok(Date.now() - opened < COOL_DOWN, 'checked within the cool-down (the test ran too slowly otherwise)');

    // The worker recovers; A's probe after the cool-down closes A's breaker, and B's with it.
    bad.failing = false;
    await waitFor(async () => (await state(a.url, 'w1')) === 'half-open', COOL_DOWN + 2_000);
    await drive(a, 'closed', 'probe via A');
    const closed = Date.now();
    await waitFor(async () => (await state(b.url, 'w1')) === 'closed', 1_000);
    assert.ok(Date.now() - closed < 1_000);
    assert.equal(await metric(a.url, 'kvgate_shared_breaker_transitions_total', { outcome: 'published' }), 2);
    const back = bad.attempts;
    for (let i = 0; i < 4; i++) assert.equal((await post(b.url + CHAT, chat(`after ${i}`))).status, 200);
    assert.ok(bad.attempts > back, 'B routes to the recovered worker again');
  });

  it('keeps each replica on its own breakers while Redis is down, failing no request', async () => {
    await redis.stop();
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 0 && (await metric(b.url, 'kvgate_shared_redis_up')) === 0);
    bad.failing = true;
    await drive(a, 'open', 'fail via A, no Redis');
    assert.ok((await metric(a.url, 'kvgate_shared_breaker_transitions_total', { outcome: 'dropped' }))! >= 1);
    assert.equal((await shared(a.url)).breakers.dropped >= 1, true);
    await new Promise((r) => setTimeout(r, 300));
    assert.equal(await state(b.url, 'w1'), 'closed', 'B did not hear of it');
    // B's own breaker still protects it: its requests succeed (retried) and its breaker opens.
    await drive(b, 'open', 'fail via B, no Redis');
    bad.failing = false;

    await redis.start();
    await waitFor(async () => (await metric(a.url, 'kvgate_shared_redis_up')) === 1 && (await metric(b.url, 'kvgate_shared_redis_up')) === 1, 20_000);
    // Sharing resumes: the next opening through A reaches B again.
    await waitFor(async () => (await state(a.url, 'w1')) === 'half-open' && (await state(b.url, 'w1')) === 'half-open', COOL_DOWN + 2_000);
    await drive(a, 'closed', 'probe via A again');
    await waitFor(async () => (await state(b.url, 'w1')) === 'closed', 1_000);
    bad.failing = true;
    await drive(a, 'open', 'fail via A again');
    await waitFor(async () => (await state(b.url, 'w1')) === 'open', 1_000);
    bad.failing = false;
  });
});

describe('Redis rate limiter', { skip }, () => {
  let redis: RedisServer;
  const links: RedisLink[] = [];
  before(async () => {
    redis = await startRedis();
  });
  after(async () => {
    for (const l of links) await l.close();
    await redis?.stop();
  });

  it('charges a tenant atomically: concurrent takes from two replicas never exceed the limit', async () => {
    const limits = new Map([['t', { requestsPerMinute: 10, concurrentRequests: 7 }]]);
    const make = async () => {
      const link = new RedisLink({ url: redis.url, timeoutMs: 1000, connectTimeoutMs: 1000 });
      links.push(link);
      await link.start();
      return new RedisRateLimiter({ link, limits, local: new RateLimiter(limits, 0), keyPrefix: 'rl-test:', leaseMs: 60_000 });
    };
    const [x, y] = [await make(), await make()];
    const checks = await Promise.all(Array.from({ length: 20 }, (_, i) => (i % 2 === 0 ? x : y).take('t', 1, 0)));
    // 7 at once at most; releasing them frees concurrency but not the minute's requests.
    assert.equal(checks.filter((c) => c.ok).length, 7);
    for (const c of checks) if (c.ok) c.release();
    await waitFor(async () => (await links[0]!.client.zcard('rl-test:rl:{t}:active')) === 0);
    const more = await Promise.all(Array.from({ length: 6 }, (_, i) => (i % 2 === 0 ? x : y).take('t', 1, 0)));
    assert.equal(more.filter((c) => c.ok).length, 3, '10 a minute in all');
    assert.equal(x.counts.fallback + y.counts.fallback, 0);
  });

  it("keeps a long request's concurrency slot by the heartbeat, and frees a dead replica's within the lease", async () => {
    const limits = new Map([['t', { concurrentRequests: 1 }]]);
    const LEASE = 900;
    const make = async () => {
      const link = new RedisLink({ url: redis.url, timeoutMs: 1000, connectTimeoutMs: 1000 });
      links.push(link);
      await link.start();
      return { link, rl: new RedisRateLimiter({ link, limits, local: new RateLimiter(limits, 0), keyPrefix: 'rl-lease:', leaseMs: LEASE }) };
    };
    const [x, y] = [await make(), await make()];
    try {
      const held = await x.rl.take('t', 1, 0);
      assert.ok(held.ok);
      assert.equal(x.rl.leasesHeld, 1);
      // Three leases long: the heartbeat (every 300 ms) has kept the slot.
      await new Promise((r) => setTimeout(r, 3 * LEASE));
      const refused = await y.rl.take('t', 1, 0);
      assert.ok(!refused.ok && refused.message.includes('at most 1 concurrent'), 'still held by the running request');
      assert.ok(x.rl.counts.renewed >= 3, `renewed ${x.rl.counts.renewed}`);
      // Replica X dies: no heartbeat, its connection gone, its request never released.
      x.rl.close();
      await x.link.close();
      const t0 = performance.now();
      assert.ok(!(await y.rl.take('t', 1, 0)).ok, 'the lease still runs');
      let freed = await y.rl.take('t', 1, 0);
      while (!freed.ok && performance.now() - t0 < 10 * LEASE) {
        await new Promise((r) => setTimeout(r, 50));
        freed = await y.rl.take('t', 1, 0);
      }
      const waited = performance.now() - t0;
      assert.ok(freed.ok, 'the dead replica’s slot was freed');
      assert.ok(waited <= LEASE + 500, `freed after ${waited.toFixed(0)} ms (lease ${LEASE} ms)`);
      // A released request is no longer renewed.
      freed.release();
      assert.equal(y.rl.leasesHeld, 0);
      assert.equal(x.rl.counts.fallback + y.rl.counts.fallback, 0);
    } finally {
      x.rl.close();
      y.rl.close();
    }
  });

  it('holds daily limits in Redis too: requests and tokens per day, the tokens settled', async () => {
    const limits = new Map<string, { requestsPerDay?: number; tokensPerDay?: number }>([
      ['d', { requestsPerDay: 3 }],
      ['u', { tokensPerDay: 1000 }],
    ]);
    const link = new RedisLink({ url: redis.url, timeoutMs: 1000, connectTimeoutMs: 1000 });
    links.push(link);
    await link.start();
    const make = () => new RedisRateLimiter({ link, limits, local: new RateLimiter(limits, 0), keyPrefix: 'rl-day:', leaseMs: 60_000 });
    const [x, y] = [make(), make()];
    const takes = await Promise.all([x, y, x, y].map((l) => l.take('d', 1, 0)));
    assert.equal(takes.filter((c) => c.ok).length, 3);
    const refused = takes.find((c) => !c.ok);
    assert.ok(refused && !refused.ok && refused.kind === 'requests');
    assert.match(refused.message, /requests per day \(RPD\): Limit 3\. Please try again in 8h0m0s\./);
    assert.ok(refused.retryAfterSeconds > 28_700 && refused.retryAfterSeconds <= 28_800);
    const a = await x.take('u', 900, 0);
    assert.ok(a.ok);
    assert.ok(!(await y.take('u', 200, 0)).ok, 'the day holds 100 more');
    a.release(100);
    await waitFor(async () => Number(await link.client.hget('rl-day:rl:{u}:tok-day', 'l')) > 899);
    assert.ok((await y.take('u', 200, 0)).ok);
    assert.equal(x.counts.fallback + y.counts.fallback, 0);
  });

  it('settles a token reservation to what the request used, in the shared bucket', async () => {
    const limits = new Map([['t', { tokensPerMinute: 1000 }]]);
    const link = new RedisLink({ url: redis.url, timeoutMs: 1000, connectTimeoutMs: 1000 });
    links.push(link);
    await link.start();
    const rl = new RedisRateLimiter({ link, limits, local: new RateLimiter(limits, 0), keyPrefix: 'rl-settle:', leaseMs: 60_000 });
    const level = async () => Number(await link.client.hget('rl-settle:rl:{t}:tok', 'l'));
    const a = await rl.take('t', 900, 0);
    assert.ok(a.ok);
    assert.ok((await level()) <= 100.5);
    // 900 reserved, 150 used: 750 back.
    a.release(150);
    await waitFor(async () => (await level()) >= 849);
    assert.ok((await level()) < 852, `level ${await level()}`);
    // More than reserved: the rest is taken too, and the next reservation must wait for it.
    const b = await rl.take('t', 800, 0);
    assert.ok(b.ok);
    b.release(1200);
    await waitFor(async () => (await level()) < -340);
    const c = await rl.take('t', 10, 0);
    assert.ok(!c.ok && c.kind === 'tokens');
    // Released once: a second release settles nothing.
    b.release(0);
    await new Promise((r) => setTimeout(r, 50));
    assert.ok((await level()) < -330);
    assert.equal(rl.counts.fallback, 0);
  });
});
