/** A worker killed and restarted on the same port: readmitted once its health probe passes. */
import { closedLoop, sleep, spawnSims, startGateway, streamChat, type FaultScenario } from '../harness.js';

export const workerRestarted: FaultScenario = {
  name: 'worker-restarted',
  description: 'SIGKILL one of three workers, restart it on the same port 1 s later',
  async run() {
    const sims = await spawnSims(3);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    try {
      const w = gw.registry.get('w1')!;
      let done = false;
      // The load runs until the worker is readmitted (or 4 s after its restart): starting a process
      // takes seconds on a busy machine.
      const load = closedLoop({ base: url, clients: 20, durationMs: 60_000, stop: () => done, next: streamChat });
      await sleep(1_500);
      sims[1]!.signal('SIGKILL');
      await sleep(1_000);
      await sims[1]!.restart();
      const restartedAt = performance.now();
      const routedAtRestart = w.routed;
      let readmittedMs = NaN;
      while (performance.now() - restartedAt < 4_000) {
        if (w.routed > routedAtRestart) {
          readmittedMs = performance.now() - restartedAt;
          break;
        }
        await sleep(20);
      }
      await sleep(500);
      done = true;
      const { tally } = await load;
      return {
        tally,
        figures: { 'first request to it after the restart (ms)': Math.round(readmittedMs) },
        checks: { 'readmitted within 4 s': Number.isFinite(readmittedMs) },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
