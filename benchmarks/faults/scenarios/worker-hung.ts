/**
 * A worker hangs (SIGSTOP) under load: three workers, 20 closed-loop streaming clients; one
 * worker is stopped for 4 s, then continued. Targets (issue 11, item 2): the gateway's
 * completions never drop to zero in any one-second window; the stopped worker gets no new request
 * from 1 s after it stopped; no request waits longer than the first-byte timeout plus one retry.
 */
import { closedLoop, perSecond, quantile, sleep, spawnSims, startGateway, streamChat, type FaultScenario } from '../harness.js';

export const workerHung: FaultScenario = {
  name: 'worker-hung',
  description: 'SIGSTOP one of three workers for 4 s under 20 streaming clients',
  async run() {
    const sims = await spawnSims(3);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    try {
      const victim = gw.registry.get('w1')!;
      const t0 = performance.now();
      const load = closedLoop({ base: url, clients: 20, durationMs: 9_000, next: streamChat });
      await sleep(2_500);
      const stoppedAt = performance.now();
      sims[1]!.signal('SIGSTOP');
      await sleep(1_000);
      const routedAfter1s = victim.routed;
      await sleep(3_000);
      const routedBeforeCont = victim.routed;
      sims[1]!.signal('SIGCONT');
      const contAt = performance.now();
      const { tally, outcomes } = await load;
      const stoppedWindows = perSecond(outcomes, stoppedAt, contAt);
      const before = perSecond(outcomes, t0 + 1_000, stoppedAt);
      const maxWait = Math.max(...outcomes.map((o) => o.ms));
      // For a hung worker the first-byte timeout that applies is the suspicion allowance (checked
      // every outlier.checkIntervalMs); "plus one retry" is one more request at the p99 of before.
      const allowance = gw.outliers?.allowanceMs(victim) ?? gw.config.timeouts.firstByteMs;
      const p99Before = quantile(outcomes.filter((o) => o.end < stoppedAt).map((o) => o.ms), 0.99);
      const bound = Math.round(allowance + gw.config.outlier.checkIntervalMs + p99Before);
      return {
        tally,
        figures: {
          'completions/s before the stop (per window)': before.join(' '),
          'completions/s while stopped (per window)': stoppedWindows.join(' '),
          'new requests to the stopped worker from +1 s to SIGCONT': routedBeforeCont - routedAfter1s,
          'longest request (ms)': Math.round(maxWait),
          'p99 request before the stop (ms)': Math.round(p99Before),
          'silence allowed before suspicion (ms)': Math.round(allowance),
          'stopped worker suspected at the end': victim.suspected,
        },
        checks: {
          'no one-second window with 0 completions': stoppedWindows.every((n) => n > 0),
          'no new request to the stopped worker 1 s after the stop': routedBeforeCont === routedAfter1s,
          [`no request waited longer than the suspicion allowance + one check + one retry at the p99 of before (${bound} ms)`]: maxWait <= bound,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
