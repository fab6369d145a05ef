/**
 * The load of the speculative benchmarks (spec.ts, spec-guard.ts): Poisson arrivals of
 * temperature-0 completions with distinct prompts of `prompt` tokens (uniform in the range) and
 * `output` tokens out.
 */
import { seededRng } from '../src/util/rng.js';
import { arrivalGapMs, uniformInt } from '../src/workload/random.js';
import { fillStream } from '../src/workload/tokens.js';
import type { BenchRequest, BenchSource } from '../src/workload/types.js';

export interface SpecLoad {
  rate: number;
  durationS: number;
  seed: number;
  /** Prompt length range, tokens (default 150–300). */
  prompt?: [number, number];
  /** Output tokens (default 128). */
  output?: number;
  /** Requests alternate between tenants t0 and t1 (the controller's prompt classes). */
  tenants?: boolean;
}

export function specLoad(o: SpecLoad): BenchSource {
  const [lo, hi] = o.prompt ?? [150, 300];
  const output = o.output ?? 128;
  return {
    name: `spec-load:${o.rate}/s`,
    skipped: 0,
    params: { rate: o.rate, duration_s: o.durationS, prompt: `${lo}-${hi}`, output },
    *open(): Generator<BenchRequest> {
      const rng = seededRng((o.seed ^ 0x5eed) >>> 0);
      let t = 0;
      for (let i = 0; ; i++) {
        t += arrivalGapMs(rng, o.rate, 1);
        if (t > o.durationS * 1000) return;
        const len = uniformInt(rng, lo, hi);
        const p = new Int32Array(len);
        fillStream(p, 0, o.seed * 1_000_003 + i + 1, len);
        yield { arrivalMs: t, promptTokens: p, maxTokens: output, outputSeed: o.seed * 1_000_003 + i + 1, ...(o.tenants ? { tenant: `t${i % 2}` } : {}) };
      }
    },
  };
}
