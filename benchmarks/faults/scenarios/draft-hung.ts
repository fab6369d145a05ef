/**
 * The draft worker of a speculative cascade hangs (SIGSTOP) under load: one target and one draft
 * worker, 16 closed-loop streaming clients at temperature 0; the draft is stopped for 4 s, then
 * continued. Targets (issue 48, item 12): completions keep flowing in every one-second window of
 * the stop; no request waits longer than one draft deadline (k × the TPOT budget at most) beyond
 * 1.5 × the steady p99 of before, nor anywhere near the 10 s call timeout; the draft worker is suspected and skipped, and taken back after.
 */
import { createGateway } from '../../../src/gateway/gateway.js';
import { parseConfig } from '../../../src/config/index.js';
import { createLogger } from '../../../src/telemetry/logger.js';
import { closedLoop, metric, perSecond, quantile, sleep, spawnSim, type Ask, type FaultScenario } from '../harness.js';

const TARGET = 'llama-3.1-70b';
const DRAFT = 'llama-3.1-8b';
const K = 4;
const TPOT_BUDGET_MS = 50;

function streamTarget(client: number, n: number): Ask {
  return {
    body: {
      model: TARGET,
      stream: true,
      temperature: 0,
      max_tokens: 32,
      messages: [{ role: 'user', content: `client ${client} question ${n}: tell me about rivers` }],
    },
  };
}

export const draftHung: FaultScenario = {
  name: 'draft-hung',
  description: 'SIGSTOP the draft worker of a speculative cascade for 4 s under 8 streaming clients',
  async run() {
    const [target, draft] = await Promise.all([
      spawnSim(['--model', TARGET, '--tp', '4']),
      spawnSim(['--model', DRAFT, '--gpu', 'a10g', '--draft-of', TARGET, '--draft-fidelity', '0.8']),
    ]);
    const config = parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      pools: [
        { name: 'target', model: TARGET, workers: [{ url: target!.url, id: 't0' }] },
        { name: 'draft', model: DRAFT, workers: [{ url: draft!.url, id: 'd0' }] },
      ],
      scrape: { intervalMs: 500 },
      health: { intervalMs: 1_000 },
      log: { level: 'silent' },
      shutdown: { drainDelayMs: 0, graceMs: 2_000 },
      speculative: {
        cascades: [{ model: TARGET, targetPool: 'target', draftPool: 'draft', k: K }],
        controller: { tpotBudgetMs: TPOT_BUDGET_MS },
      },
    });
    const gw = createGateway(config, { logger: createLogger({ level: 'silent' }) });
    const { url } = await gw.start();
    const metrics = async () => (await fetch(`${url}/metrics`)).text();
    const count = (text: string, name: string, labels: Record<string, string>) => metric(text, name, labels) ?? 0;
    try {
      const victim = gw.registry.get('d0')!;
      const t0 = performance.now();
      const load = closedLoop({ base: url, clients: 8, durationMs: 13_000, next: streamTarget });
      await sleep(6_000);
      const m0 = await metrics();
      const stoppedAt = performance.now();
      draft!.signal('SIGSTOP');
      await sleep(4_000);
      const suspectedWhileStopped = victim.suspected;
      const m1 = await metrics();
      draft!.signal('SIGCONT');
      const contAt = performance.now();
      const { tally, outcomes } = await load;
      const m2 = await metrics();
      // From 2 s in: the first requests' rounds include the connections' set-up.
      const before = perSecond(outcomes, t0 + 2_000, stoppedAt);
      const stoppedWindows = perSecond(outcomes, stoppedAt, contAt);
      const after = perSecond(outcomes, contAt + 1_000, performance.now());
      // Steady state: the requests that started 2 s in or later and ended before the stop.
      const p99Before = quantile(outcomes.filter((o) => o.end - o.ms > t0 + 2_000 && o.end < stoppedAt).map((o) => o.ms), 0.99);
      const during = outcomes.filter((o) => o.end > stoppedAt && o.end - o.ms < contAt);
      const maxDuring = Math.max(...during.map((o) => o.ms));
      const deadlineCap = Math.min(config.speculative.callTimeoutMs, K * TPOT_BUDGET_MS);
      const bound = Math.round(1.5 * p99Before + deadlineCap);
      const timeouts = count(m1, 'kvgate_spec_draft_timeouts_total', { model: TARGET, worker: 'd0' }) - count(m0, 'kvgate_spec_draft_timeouts_total', { model: TARGET, worker: 'd0' });
      const skipped = count(m1, 'kvgate_spec_requests_total', { model: TARGET, path: 'plain', reason: 'no_draft_worker' }) - count(m0, 'kvgate_spec_requests_total', { model: TARGET, path: 'plain', reason: 'no_draft_worker' });
      const cascadeAfter = count(m2, 'kvgate_spec_requests_total', { model: TARGET, path: 'cascade', reason: 'ok' }) - count(m1, 'kvgate_spec_requests_total', { model: TARGET, path: 'cascade', reason: 'ok' });
      return {
        tally,
        figures: {
          'completions/s before the stop (per window)': before.join(' '),
          'completions/s while stopped (per window)': stoppedWindows.join(' '),
          'completions/s after SIGCONT (per window)': after.join(' '),
          'p99 request before the stop (ms)': Math.round(p99Before),
          'longest request overlapping the stop (ms)': Math.round(maxDuring),
          'draft calls that missed their deadline': timeouts,
          'requests served target-only, draft skipped': skipped,
          'cascade requests after SIGCONT': cascadeAfter,
          'draft worker suspected while stopped': suspectedWhileStopped,
        },
        checks: {
          'no one-second window with 0 completions while stopped': stoppedWindows.every((n) => n > 0),
          [`no request overlapping the stop took longer than 1.5 × the steady p99 of before + k × the TPOT budget (${bound} ms)`]: maxDuring <= bound,
          [`no request overlapping the stop waited out the ${config.speculative.callTimeoutMs} ms call timeout`]: maxDuring < config.speculative.callTimeoutMs,
          'the stopped draft worker was suspected and skipped': suspectedWhileStopped && skipped > 0,
          'the cascade took the draft back after SIGCONT': cascadeAfter > 0,
        },
      };
    } finally {
      await gw.close();
      await Promise.all([target!.stop(), draft!.stop()]);
    }
  },
};
