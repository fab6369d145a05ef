/**
 * Tenant B continues tenant A's stored Responses API conversation by naming A's response id in
 * `previous_response_id`, where the gateway cannot check the owner from memory: after a gateway
 * restart (no Redis), through a restarted replica (Redis holds the owners), and through a replica
 * that never saw the response while Redis is down. The worker still holds the response every
 * time; the gateway must never let B continue it: 404 `response_not_found` when the owner is
 * unknown or is A, 503 `response_directory_unavailable` (Retry-After) while Redis is away. A keeps
 * its conversation through a restarted replica (the owners are in Redis).
 */
import { metric, MODEL, redisForScenario, skipped, sleep, spawnSims, startGateway, Tally, type FaultScenario, type Outcome, fetchMetrics } from '../harness.js';

const A = { authorization: 'Bearer sk-owner-aaaa-01' };
const B = { authorization: 'Bearer sk-thief-bbbb-01' };
const TENANTS = [
  { id: 'owner', keys: [{ value: 'sk-owner-aaaa-01' }] },
  { id: 'thief', keys: [{ value: 'sk-thief-bbbb-01' }] },
];
const N = 5;

/** A gateway's metric (0 when absent). */
async function metricOf(base: string, name: string, labels: Record<string, string> = {}): Promise<number> {
  return metric(await fetchMetrics(base), name, labels) ?? 0;
}

/** Wait (at most 10 s) until `f()` holds. */
async function until(f: () => Promise<boolean>): Promise<boolean> {
  for (let i = 0; i < 100; i++) {
    if (await f()) return true;
    await sleep(100);
  }
  return false;
}

interface Answer extends Outcome {
  id?: string;
  code?: string;
  retryAfter?: string | null;
}

/** POST /v1/responses, classified as the harness does (a response object is a whole answer). */
async function respond(base: string, who: Record<string, string>, body: Record<string, unknown>): Promise<Answer> {
  const t0 = performance.now();
  const out = (kind: Outcome['kind'], detail: string, status: number, extra: Partial<Answer> = {}): Answer => ({ kind, detail, status, ms: performance.now() - t0, end: performance.now(), text: '', ...extra });
  try {
    const r = await fetch(base + '/v1/responses', {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...who },
      body: JSON.stringify({ model: MODEL, max_output_tokens: 2, ...body }),
      signal: AbortSignal.timeout(30_000),
    });
    const j = (await r.json().catch(() => null)) as { id?: string; object?: string; error?: { message?: unknown; type?: unknown; code?: string } } | null;
    if (r.ok && j?.object === 'response') return out('ok', 'ok', r.status, { id: j.id });
    if (r.status >= 400 && typeof j?.error?.message === 'string' && typeof j.error.type === 'string') {
      return out('error', `${r.status} ${j.error.code}`, r.status, { code: j.error.code, retryAfter: r.headers.get('retry-after') });
    }
    return out('unanswered', `${r.status} not a response nor an OpenAI-shaped error`, r.status);
  } catch (e) {
    return out('unanswered', (e as Error).message, 0);
  }
}

export const responsesOwner: FaultScenario = {
  name: 'responses-owner',
  description: 'tenant B continues tenant A’s response after a restart and with Redis down',
  async run() {
    const redis = await redisForScenario();
    if (typeof redis === 'string') return skipped(redis);
    const sims = await spawnSims(2);
    const urls = sims.map((s) => s.url);
    const tally = new Tally();
    const closers: Array<() => Promise<unknown>> = [];
    const add = (a: Answer) => (tally.add(a), a);
    const stolen: Answer[] = [];
    const steal = async (base: string, id: string) => stolen.push(add(await respond(base, B, { input: 'Go on.', previous_response_id: id })));
    const make = async (base: string, n: number) => {
      const ids: string[] = [];
      for (let i = 0; i < n; i++) {
        const a = add(await respond(base, A, { input: `A private conversation ${i}.` }));
        if (a.id) ids.push(a.id);
      }
      return ids;
    };
    try {
      // 1. One gateway, no Redis, restarted: it has forgotten who owns what.
      const first = await startGateway(urls, { tenants: TENANTS });
      const before = await make(first.url, N);
      await first.gw.close();
      const second = await startGateway(urls, { tenants: TENANTS });
      closers.push(() => second.gw.close());
      for (const id of before) await steal(second.url, id);
      const afterRestart = stolen.splice(0);

      // 2. Two replicas sharing Redis; replica 2 restarts: the owners are in Redis.
      const shared = { tenants: TENANTS, shared: { redis: { url: redis.url, keyPrefix: 'faults-resp:', timeoutMs: 1_000 } } };
      const r1 = await startGateway(urls, shared as never);
      closers.push(() => r1.gw.close());
      let r2 = await startGateway(urls, shared as never);
      await until(async () => (await metricOf(r1.url, 'kvgate_shared_redis_up')) === 1);
      const kept = await make(r1.url, N);
      await until(async () => (await metricOf(r1.url, 'kvgate_shared_response_lookups_total', { result: 'stored' })) >= N);
      await r2.gw.close();
      r2 = await startGateway(urls, shared as never);
      closers.push(() => r2.gw.close());
      await until(async () => (await metricOf(r2.url, 'kvgate_shared_redis_up')) === 1);
      const ownerAfterReplicaRestart: Answer[] = [];
      for (const id of kept) {
        await steal(r2.url, id);
        ownerAfterReplicaRestart.push(add(await respond(r2.url, A, { input: 'Go on.', previous_response_id: id })));
      }
      const viaRestartedReplica = stolen.splice(0);

      // 3. Redis down: replica 2 cannot check the owner of what replica 1 relayed.
      const unseen = await make(r1.url, N);
      await until(async () => (await metricOf(r1.url, 'kvgate_shared_response_lookups_total', { result: 'stored' })) >= 2 * N);
      await redis.stop();
      await until(async () => (await metricOf(r2.url, 'kvgate_shared_redis_up')) === 0);
      const ownerWhileDown: Answer[] = [];
      for (const id of unseen) {
        await steal(r2.url, id);
        ownerWhileDown.push(add(await respond(r2.url, A, { input: 'Go on.', previous_response_id: id })));
      }
      const whileDown = stolen.splice(0);
      // Replica 1 relayed them: it still knows their owner without Redis.
      const ownerViaR1 = [];
      for (const id of unseen) {
        await steal(r1.url, id);
        ownerViaR1.push(add(await respond(r1.url, A, { input: 'Go on.', previous_response_id: id })));
      }
      const viaR1WhileDown = stolen.splice(0);

      const all = [...afterRestart, ...viaRestartedReplica, ...whileDown, ...viaR1WhileDown];
      const codes = (xs: Answer[]) => [...new Set(xs.map((x) => x.detail))].join(', ');
      return {
        tally,
        figures: {
          'B’s continuations of A’s responses answered 200': `${all.filter((a) => a.kind === 'ok').length}/${all.length}`,
          'after a gateway restart (no Redis), B saw': codes(afterRestart),
          'through a restarted replica (Redis up), B saw': codes(viaRestartedReplica),
          'through a replica that never saw them, Redis down, B saw': codes(whileDown),
          'through the replica that relayed them, Redis down, B saw': codes(viaR1WhileDown),
          'A continues through a restarted replica (Redis up)': `${ownerAfterReplicaRestart.filter((a) => a.kind === 'ok').length}/${ownerAfterReplicaRestart.length}`,
          'A through a replica that never saw them, Redis down': codes(ownerWhileDown),
          'A through the replica that relayed them, Redis down': `${ownerViaR1.filter((a) => a.kind === 'ok').length}/${ownerViaR1.length} 200`,
        },
        checks: {
          'no continuation of another tenant’s response is served': all.length === 4 * N && all.every((a) => a.kind === 'error'),
          'unknown owner after a restart: 404 response_not_found': afterRestart.every((a) => a.status === 404 && a.code === 'response_not_found'),
          'owner on record in Redis: B 404, A 200 through a restarted replica':
            viaRestartedReplica.every((a) => a.status === 404) && ownerAfterReplicaRestart.every((a) => a.kind === 'ok'),
          'Redis down: 503 response_directory_unavailable with Retry-After, for B and A alike':
            [...whileDown, ...ownerWhileDown].every((a) => a.status === 503 && a.code === 'response_directory_unavailable' && a.retryAfter === '1'),
          'Redis down, the relaying replica still serves A and refuses B': ownerViaR1.every((a) => a.kind === 'ok') && viaR1WhileDown.every((a) => a.status === 404),
        },
      };
    } finally {
      for (const c of closers.reverse()) await c().catch(() => undefined);
      await Promise.all(sims.map((s) => s.stop()));
      await redis.stop().catch(() => undefined);
    }
  },
};
