/** Every worker of the model down: clients get 502/503 in OpenAI's shape quickly, never a hang. */
import { closedLoop, quantile, sleep, spawnSims, startGateway, streamChat, type FaultScenario } from '../harness.js';

export const allDown: FaultScenario = {
  name: 'all-workers-down',
  description: 'SIGKILL both workers of the model under 10 streaming clients',
  async run() {
    const sims = await spawnSims(2);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    try {
      const load = closedLoop({ base: url, clients: 10, durationMs: 5_000, next: streamChat });
      await sleep(1_500);
      const killedAt = performance.now();
      for (const s of sims) s.signal('SIGKILL');
      const { tally, outcomes } = await load;
      const after = outcomes.filter((o) => o.end - o.ms > killedAt + 200);
      const errMs = after.filter((o) => o.kind === 'error').map((o) => o.ms);
      // By default /ready follows the gateway, not the fleet: it stays 200 and reports no routable worker.
      const r = await fetch(url + '/ready');
      const ready = ((await r.json()) as { workers_routable?: boolean }).workers_routable === false ? `${r.status}, no routable worker` : String(r.status);
      return {
        tally,
        figures: { 'requests after the kill': after.length, 'p99 time to the error (ms)': Math.round(quantile(errMs, 0.99)), '/ready': ready },
        checks: {
          'every request after the kill got a documented error': after.every((o) => o.kind === 'error'),
          '/ready reports no routable worker': ready === '200, no routable worker',
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
