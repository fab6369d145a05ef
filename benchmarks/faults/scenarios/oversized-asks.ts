/**
 * Anonymous callers asking for n: 128 and max_tokens up to the context length, beside normal
 * traffic: refused with 400 naming the parameter, and normal requests' latency does not move.
 */
import { ask, closedLoop, MODEL, quantile, spawnSims, startGateway, streamChat, Tally, type FaultScenario } from '../harness.js';

export const oversizedAsks: FaultScenario = {
  name: 'oversized-asks',
  description: 'n: 128 and max_tokens: 131072 asks beside 10 streaming clients',
  async run() {
    const sims = await spawnSims(2);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    try {
      const baseline = await closedLoop({ base: url, clients: 10, durationMs: 2_000, next: streamChat });
      const abuse = new Tally();
      const params = new Map<string, number>();
      const abusers = (async () => {
        const end = performance.now() + 3_000;
        for (let i = 0; performance.now() < end; i++) {
          const body =
            i % 2 === 0
              ? { model: MODEL, n: 128, max_tokens: 1_000, messages: [{ role: 'user', content: 'fan out' }] }
              : { model: MODEL, max_tokens: 131_072, messages: [{ role: 'user', content: 'go on forever' }] };
          const o = await ask(url, { body });
          abuse.add(o);
          if (o.kind === 'error') {
            const p = (JSON.parse(o.text) as { error: { param: string } }).error.param;
            params.set(p, (params.get(p) ?? 0) + 1);
          }
        }
      })();
      const during = await closedLoop({ base: url, clients: 10, durationMs: 3_000, next: streamChat });
      await abusers;
      const tally = new Tally();
      tally.merge(baseline.tally);
      tally.merge(during.tally);
      tally.merge(abuse);
      const p50 = (xs: { ms: number }[]) => Math.round(quantile(xs.map((o) => o.ms), 0.5));
      return {
        tally,
        figures: {
          'oversized asks sent / refused 400': `${abuse.sent} / ${abuse.byError.get('400 limit_exceeded') ?? 0}`,
          'param named': [...params].map(([k, v]) => `${k} ×${v}`).join(', '),
          'normal p50 before / during (ms)': `${p50(baseline.outcomes)} / ${p50(during.outcomes)}`,
        },
        checks: {
          'every oversized ask refused with 400': abuse.byError.get('400 limit_exceeded') === abuse.sent,
          'normal requests all OK': baseline.tally.ok === baseline.tally.sent && during.tally.ok === during.tally.sent,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
