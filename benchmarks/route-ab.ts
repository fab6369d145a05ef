/**
 * `npm run bench -- route-ab --baseline DIR`: this checkout's routing decision against another
 * build's, in one process, decisions interleaved. Both builds route the same requests (an
 * 8,000-token prompt, a 6,000-token prefix shared by its group of 64 plus 2,000 unique tokens,
 * as in bench route) over their own 16 workers (--workers) with warm indexes, the prompt tokenized again
 * before each side's decision so both start equally cache-cold, and which side goes first
 * alternates. The host's noise (2 shared cores) then falls on both alike, and the ratio of their
 * p50, p99 and mean is what the change did; `--baseline .` measures the method's own spread.
 *
 * DIR is a build's root (its `dist/` is read), e.g. a `git worktree` of the commit before the
 * change with `npx tsc` run in it. Options: --baseline DIR (required), --policy NAME (kvgate),
 * --decisions N (4000 per side), --warmup N (6000), --rounds N (3), --workers N (16).
 */
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import { benchArgs } from './args.js';
import { estimateTokenizer } from '../src/tokenizer/estimate.js';
import { seededRng } from '../src/util/rng.js';
import { routePrompts } from './route-prompts.js';

interface Build {
  WorkerState: typeof import('../src/fleet/worker-state.js').WorkerState;
  createPolicy: typeof import('../src/scheduler/registry.js').createPolicy;
  Router: typeof import('../src/scheduler/router.js').Router;
  VirtualClock: typeof import('../src/util/clock.js').VirtualClock;
  seededRng: typeof import('../src/util/rng.js').seededRng;
  RequestState: typeof import('../src/util/state.js').RequestState;
}

const { values } = benchArgs('route-ab', {
  options: {
    baseline: { type: 'string' },
    policy: { type: 'string', default: 'kvgate' },
    decisions: { type: 'string', default: '4000' },
    warmup: { type: 'string', default: '6000' },
    rounds: { type: 'string', default: '3' },
    workers: { type: 'string', default: '16' },
    help: { type: 'boolean', short: 'h' },
  },
});
if (values.help || !values.baseline) {
  console.log(
    'npm run bench -- route-ab --baseline DIR [--policy NAME] [--decisions N] [--warmup N] [--rounds N] [--workers N]\n\n' +
      "This checkout's routing decision against the build in DIR (its dist/), in one process, decisions\n" +
      'interleaved on the same requests; prints each side\'s p50, p99 and mean and their ratios per round.',
  );
  process.exit(values.help ? 0 : 2);
}
const DECISIONS = Number(values.decisions);
const WARMUP = Number(values.warmup);
const ROUNDS = Number(values.rounds);
const WORKERS = Number(values.workers);
const PROMPT = 8000;
const SHARED = 6000;
const GROUPS = 64;

async function load(distRoot: string): Promise<Build> {
  const at = (p: string): string => pathToFileURL(resolve(distRoot, p)).href;
  return {
    WorkerState: (await import(at('src/fleet/worker-state.js'))).WorkerState,
    createPolicy: (await import(at('src/scheduler/registry.js'))).createPolicy,
    Router: (await import(at('src/scheduler/router.js'))).Router,
    VirtualClock: (await import(at('src/util/clock.js'))).VirtualClock,
    seededRng: (await import(at('src/util/rng.js'))).seededRng,
    RequestState: (await import(at('src/util/state.js'))).RequestState,
  };
}

// This file runs from dist/benchmarks/: this checkout's dist is one level up.
const here = new URL('..', import.meta.url).pathname;
const sides = [
  { name: 'baseline', build: await load(resolve(values.baseline, 'dist')) },
  { name: 'this checkout', build: await load(here) },
];

const rng = seededRng(42);
const promptText = routePrompts(rng, { groups: GROUPS, promptTokens: PROMPT, sharedTokens: SHARED });

const quantile = (a: Float64Array, q: number): number => a[Math.min(a.length - 1, Math.floor(q * a.length))]!;

for (let round = 1; round <= ROUNDS; round++) {
  const runs = sides.map(({ build: b }) => {
    const clock = new b.VirtualClock(0);
    const policy = b.createPolicy(values.policy);
    const router = new b.Router({ policy, clock, rng: b.seededRng(7), staleAfterMs: 1e12 });
    const workers = Array.from({ length: WORKERS }, (_, i) => {
      const w = new b.WorkerState({ id: `w${i}`, url: `http://127.0.0.1:${9000 + i}`, pool: 'target', model: 'm', numGpuBlocks: 30_000, blockSize: 16 });
      w.applySnapshot({ at: 0, kvUsage: 0.3, running: 8, waiting: i % 3, numGpuBlocks: 30_000, blockSize: 16 });
      return w;
    });
    return { b, clock, policy, router, workers, times: new Float64Array(DECISIONS) };
  });
  for (let i = 0; i < WARMUP + DECISIONS; i++) {
    const text = promptText();
    const tokens = estimateTokenizer.encode(text).slice(0, PROMPT);
    for (const k of i % 2 === 0 ? [0, 1] : [1, 0]) {
      const s = runs[k]!;
      estimateTokenizer.encode(text); // what the gateway does just before: both sides start cache-cold
      const req = { id: `r${i}`, model: 'm', promptText: text, promptTokens: tokens, maxTokens: 256, state: new s.b.RequestState() };
      s.policy.prepare?.(req, s.workers);
      const t0 = process.hrtime.bigint();
      const out = s.router.route(req, s.workers);
      const us = Number(process.hrtime.bigint() - t0) / 1000;
      if (i >= WARMUP) s.times[i - WARMUP] = us;
      s.policy.prefixIndex?.maintain();
      s.clock.advance(1);
      s.router.firstToken(req.id);
      s.policy.prefixIndex?.maintain();
      s.router.complete(req.id, out.ok);
    }
  }
  const stats = runs.map((r) => {
    const t = r.times.slice().sort();
    let sum = 0;
    for (const x of t) sum += x;
    return { p50: quantile(t, 0.5), p99: quantile(t, 0.99), mean: sum / t.length };
  });
  const f = (x: number): string => x.toFixed(1).padStart(7);
  console.log(`round ${round}: ${DECISIONS} decisions per side, policy ${values.policy}, ${WORKERS} workers, ${PROMPT}-token prompts (µs)`);
  for (let k = 0; k < sides.length; k++) console.log(`  ${sides[k]!.name.padEnd(14)} p50 ${f(stats[k]!.p50)}  p99 ${f(stats[k]!.p99)}  mean ${f(stats[k]!.mean)}`);
  const r = (k: 'p50' | 'p99' | 'mean'): string => (stats[1]![k] / stats[0]![k]).toFixed(3);
  console.log(`  this checkout ÷ baseline: p50 ${r('p50')}  p99 ${r('p99')}  mean ${r('mean')}`);
}
