/** A worker killed (SIGKILL) under streaming load: retried where no byte was sent, an SSE error event where one was. */
import { closedLoop, perSecond, sleep, spawnSims, startGateway, streamChat, type FaultScenario } from '../harness.js';

export const workerKilled: FaultScenario = {
  name: 'worker-killed',
  description: 'SIGKILL one of three workers under 20 streaming clients',
  async run() {
    const sims = await spawnSims(3);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    try {
      const load = closedLoop({ base: url, clients: 20, durationMs: 6_000, next: streamChat });
      await sleep(2_000);
      const killedAt = performance.now();
      sims[1]!.signal('SIGKILL');
      const { tally, outcomes } = await load;
      const after = perSecond(outcomes, killedAt, killedAt + 3_000);
      return {
        tally,
        figures: { 'completions/s after the kill (per window)': after.join(' '), 'gateway in flight at the end': gw.inflight },
        checks: { 'completions never stop': after.every((n) => n > 0), 'nothing left in flight': gw.inflight === 0 },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
