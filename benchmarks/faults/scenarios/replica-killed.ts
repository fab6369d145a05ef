/**
 * A gateway replica killed (SIGKILL) with a tenant's streams in flight, two replicas sharing
 * Redis, the tenant limited to 4 concurrent requests across them. The dead replica never releases
 * the tenant's concurrency slots; their leases (shared.leaseMs, 15 s by default, renewed by each
 * replica's heartbeat while its requests run) must lapse, so the surviving replica serves the
 * tenant again within seconds, not after the longest request could have run.
 */
import { ask, metric, MODEL, redisForScenario, skipped, sleep, spawnGateway, spawnSims, startGateway, Tally, type FaultScenario, fetchMetrics } from '../harness.js';

const KEY = 'sk-acme-replica-01';
const CONCURRENT = 4;
/** shared.leaseMs's default (the scenario runs with the defaults). */
const LEASE_MS = 15_000;
const TENANTS = [{ id: 'acme', keys: [{ value: KEY }], limits: { concurrentRequests: CONCURRENT } }];

export const replicaKilled: FaultScenario = {
  name: 'replica-killed',
  description: 'a replica killed with a tenant’s streams in flight; the other replica must serve the tenant again',
  async run() {
    const redis = await redisForScenario();
    if (typeof redis === 'string') return skipped(redis);
    const sims = await spawnSims(2);
    const urls = sims.map((s) => s.url);
    const extra = { tenants: TENANTS, shared: { redis: { url: redis.url, keyPrefix: 'faults-lease:', timeoutMs: 1_000 } } };
    const doomed = await spawnGateway(urls, extra as never);
    const survivor = await startGateway(urls, extra as never);
    const tally = new Tally();
    const short = { body: { model: MODEL, max_tokens: 4, messages: [{ role: 'user', content: 'ping' }] }, headers: { authorization: `Bearer ${KEY}` }, timeoutMs: 10_000 };
    try {
      // Both replicas count in Redis (until connected, a replica counts alone).
      for (const base of [doomed.url, survivor.url]) {
        for (let i = 0; i < 100; i++) {
          if (metric(await fetchMetrics(base), 'kvgate_shared_redis_up') === 1) break;
          await sleep(100);
        }
      }
      // The tenant's whole concurrency, as long streams through the replica about to die.
      const streams = await Promise.all(
        Array.from({ length: CONCURRENT }, async (_, i) => {
          const r = await fetch(doomed.url + '/v1/chat/completions', {
            method: 'POST',
            headers: { 'content-type': 'application/json', authorization: `Bearer ${KEY}` },
            // ignore_eos: the simulated worker writes all of max_tokens (a minute or more).
            body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 4000, ignore_eos: true, messages: [{ role: 'user', content: `a long story ${i}` }] }),
          });
          const reader = r.body!.getReader();
          await reader.read(); // under way
          return { status: r.status, reader };
        }),
      );
      const busy = await ask(survivor.url, short);
      tally.add(busy);
      const heldAcross = busy.status === 429 && /at most 4 concurrent/.test(busy.text);

      await doomed.kill();
      const killedAt = performance.now();
      // The clients of the dead replica see their streams cut: nothing is left to answer them.
      let cut = 0;
      await Promise.all(
        streams.map(async (s) => {
          let text = '';
          try {
            for (;;) {
              const { value, done } = await s.reader.read();
              if (done) break;
              text += new TextDecoder().decode(value);
            }
          } catch {
            // reset
          }
          if (!text.includes('[DONE]')) cut++;
        }),
      );
      // The tenant asks the surviving replica every 250 ms until served (at most 40 s).
      let servedAfterS = NaN;
      let refusedMeanwhile = 0;
      while (performance.now() - killedAt < 40_000) {
        const o = await ask(survivor.url, short);
        tally.add(o);
        if (o.kind === 'ok') {
          servedAfterS = (performance.now() - killedAt) / 1000;
          break;
        }
        refusedMeanwhile++;
        await sleep(250);
      }
      return {
        tally,
        figures: {
          'streams through the killed replica (not tallied: its process is gone)': `${streams.filter((s) => s.status === 200).length} under way, ${cut} cut`,
          'the other replica, before the kill': busy.detail,
          'seconds until the other replica served the tenant again': Number.isNaN(servedAfterS) ? 'not within 40 s' : servedAfterS.toFixed(1),
          'refusals meanwhile (429 at most 4 concurrent)': refusedMeanwhile,
          'shared.leaseMs (default)': LEASE_MS,
        },
        checks: {
          'the tenant’s limit held across replicas before the kill': heldAcross,
          'served again within the lease and a heartbeat (≤ 17 s)': servedAfterS <= LEASE_MS / 1000 + 2,
        },
      };
    } finally {
      await doomed.kill();
      await survivor.gw.close();
      await Promise.all(sims.map((s) => s.stop()));
      await redis.stop().catch(() => undefined);
    }
  },
};
