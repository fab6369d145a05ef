/**
 * Routing micro-benchmark (`npm run bench -- route`): time to route one 8,000-token prompt over 16
 * workers with warm indexes, per policy — the whole Router.route call (block hashing, index
 * lookup, filters, scorers, picker, reservation, pick-time index insert), tokenization excluded
 * and reported on its own — and the prefix index's memory per million blocks.
 *
 * Warm means steady state: enough requests routed first (--warmup, default 6,000) that every
 * worker's index is at its capacity (--blocks, default 30,000) and evicts as it inserts. A policy
 * fed by KV events (usesKvEvents: dynamo, llm-d-precise) learns nothing from its own routing, so
 * after each of its decisions the chosen worker's index gets the prompt's blocks as that worker's
 * BlockStored events would report them (untimed: the subscriber's work, not the decision's).
 * Each prompt is a 6,000-token prefix shared by its group (64 groups) plus 2,000 unique tokens.
 *
 * Options: `npm run bench -- route --help`.
 */
import { WorkerState } from '../src/fleet/worker-state.js';
import { createPolicy } from '../src/scheduler/registry.js';
import { KVGATE_HASH_SEED, PromptBlocks, promptBlocks } from '../src/kv/prompt-blocks.js';
import { PrefixIndex } from '../src/scheduler/index/prefix-index.js';
import { Router } from '../src/scheduler/router.js';
import type { RouteOutcome, RouteRequest } from '../src/scheduler/types.js';
import { estimateTokenizer } from '../src/tokenizer/estimate.js';
import { VirtualClock } from '../src/util/clock.js';
import { seededRng } from '../src/util/rng.js';
import { RequestState } from '../src/util/state.js';
import { availableParallelism, loadavg } from 'node:os';
import { setFlagsFromString } from 'node:v8';
import { PerformanceObserver, performance } from 'node:perf_hooks';
import { runInNewContext } from 'node:vm';
import { benchArgs } from './args.js';
import { writeGeneratedTables } from './doc-tables.js';
import { routePrompts } from './route-prompts.js';

const { values } = benchArgs('route', {
  options: {
    workers: { type: 'string', default: '16' },
    iterations: { type: 'string', default: '5000' },
    'prompt-tokens': { type: 'string', default: '8000' },
    policies: { type: 'string', default: 'kvgate,llm-d,llm-d-precise,dynamo,sglang-cache-aware,least-load' },
    blocks: { type: 'string', default: '30000' },
    warmup: { type: 'string', default: '6000' },
    batch: { type: 'string', default: '1' },
    json: { type: 'boolean', default: false },
    'write-docs': { type: 'string', multiple: true },
    help: { type: 'boolean', short: 'h', default: false },
  },
});

if (values.help) {
  process.stdout.write(
    'npm run bench -- route [options]\n\n' +
      'Time for each policy to route one prompt (a prefix shared by one of 64 groups plus unique tokens)\n' +
      'over warm workers: the decision, the prefix index upkeep it defers to idle time (the pick-time\n' +
      'prediction and the first token\'s confirmation) and the CPU per request; tokenizing and hashing\n' +
      'the prompt on their own; the prefix index\'s memory and insert and match costs per block.\n\n' +
      'Options:\n' +
      '  --workers N          workers (default 16)\n' +
      '  --iterations N       timed decisions per policy (default 5000)\n' +
      '  --prompt-tokens N    prompt length (default 8000; three quarters shared)\n' +
      '  --policies A,B       policies (default kvgate,llm-d,llm-d-precise,dynamo,sglang-cache-aware,least-load)\n' +
      '  --blocks N           KV blocks per worker (default 30000)\n' +
      '  --warmup N           requests routed before timing (default 6000)\n' +
      '  --batch N            tokenize N prompts, then route them (default 1: each just before its\n' +
      '                       decision, as the gateway does; more leaves fewer caches cold)\n' +
      '  --json               the figures as JSON\n' +
      '  --write-docs FILE    rewrite this command\'s generated table (decisions) in FILE (repeatable)\n' +
      '  -h, --help           this text\n',
  );
  process.exit(0);
}

setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** A whole-number option of at least `min`; anything else ends the run with the reason. */
function count(name: 'workers' | 'iterations' | 'prompt-tokens' | 'blocks' | 'warmup' | 'batch', min = 1): number {
  const v = Number(values[name]);
  if (!Number.isInteger(v) || v < min) {
    process.stderr.write(`bench route: --${name} must be a whole number of at least ${min}, got '${values[name]}' (--help lists the options)\n`);
    process.exit(2);
  }
  return v;
}

const ITER = count('iterations');
const WORKERS = count('workers');
const PROMPT = count('prompt-tokens');
const POLICIES = values.policies.split(',');
const GROUPS = 64;
/** KV blocks per worker: Llama-3.1-8B on one H100 holds roughly 30,000 blocks of 16 tokens. */
const BLOCKS = count('blocks');
const WARMUP = count('warmup', 0);
const SHARED = Math.floor(PROMPT * 0.75);
const JSON_OUT = values.json;

/** Every GC pause of the run, [start, end] in performance.now() ms. */
const gcPauses: Array<[number, number]> = [];
new PerformanceObserver((list) => {
  for (const e of list.getEntries()) gcPauses.push([e.startTime, e.startTime + e.duration]);
}).observe({ entryTypes: ['gc'] });

const rng = seededRng(42);
const promptText = routePrompts(rng, { groups: GROUPS, promptTokens: PROMPT, sharedTokens: SHARED });

function quantile(sorted: Float64Array, q: number): number {
  return sorted[Math.min(sorted.length - 1, Math.floor(q * sorted.length))]!;
}

interface Row {
  policy: string;
  p50us: number;
  p99us: number;
  /** p99 of the decisions no garbage collection ran during (the decision's own cost). */
  p99NoGcUs: number;
  /** Share of decisions a GC pause fell into. */
  gcShare: number;
  meanus: number;
  /** Deferred index maintenance per request (pick-time prediction, first-token confirmation), p99. */
  deferredP99us: number;
  /** Decision plus deferred index work, mean: the gateway's CPU per routed request. */
  cpuPerRequestUs: number;
  prefixHitMean: number;
}

function makeWorkers(): WorkerState[] {
  return Array.from({ length: WORKERS }, (_, i) => {
    const w = new WorkerState({ id: `w${i}`, url: `http://127.0.0.1:${9000 + i}`, pool: 'target', model: 'm', numGpuBlocks: BLOCKS, blockSize: 16 });
    w.applySnapshot({ at: 0, kvUsage: 0.3, running: 8, waiting: i % 3, numGpuBlocks: BLOCKS, blockSize: 16 });
    return w;
  });
}

const hashSamples: number[] = [];

function makeReq(text: string, id: string): { req: RouteRequest; tokenizeUs: number } {
  const t0 = process.hrtime.bigint();
  const tokens = estimateTokenizer.encode(text).slice(0, PROMPT);
  const tokenizeUs = Number(process.hrtime.bigint() - t0) / 1000;
  // The block-hash part of a decision, measured on its own (the decision hashes lazily, only as
  // far as some worker matches, and the deferred insert hashes the rest).
  const h0 = process.hrtime.bigint();
  new PromptBlocks(tokens, 16, KVGATE_HASH_SEED).all();
  hashSamples.push(Number(process.hrtime.bigint() - h0) / 1000);
  return { req: { id, model: 'm', promptText: text, promptTokens: tokens, maxTokens: 256, state: new RequestState() }, tokenizeUs };
}

/**
 * `prehash`: compute the prompt's block hashes where the gateway tokenizes (request preparation),
 * so the decision itself only looks them up. Reported as its own row.
 */
async function benchPolicy(name: string, tokenizeSamples: number[], prehash = false): Promise<Row> {
  const clock = new VirtualClock(0);
  const policy = createPolicy(name);
  /** What the chosen worker's KV events would report once it has prefilled the prompt. */
  const events = policy.usesKvEvents ? policy.prefixIndex : undefined;
  const stored = (req: RouteRequest, out: RouteOutcome) => {
    if (events && out.ok) events.insert(out.decision.worker.id, promptBlocks(req.state, req.promptTokens, 16, KVGATE_HASH_SEED), 'event', clock.now());
  };
  const router = new Router({ policy, clock, rng: seededRng(7), staleAfterMs: 1e12 });
  const workers = makeWorkers();
  // Warm up: fill the indexes through ordinary routing (and the JIT along the way).
  for (let i = 0; i < WARMUP; i++) {
    const { req } = makeReq(promptText(), `warm-${i}`);
    const out = router.route(req, workers);
    stored(req, out);
    clock.advance(1);
    router.firstToken(req.id);
    router.complete(req.id, out.ok);
  }
  // Each request is tokenized just before it is routed, as in the gateway (--batch N builds N
  // at a time instead: fewer cache-cold decisions, rosier numbers). Tokenization is not timed.
  const times = new Float64Array(ITER);
  const windows = new Float64Array(2 * ITER);
  const deferred = new Float64Array(ITER);
  let hit = 0;
  const BATCH = count('batch');
  for (let start = 0; start < ITER; start += BATCH) {
    const reqs: RouteRequest[] = [];
    for (let i = start; i < Math.min(ITER, start + BATCH); i++) {
      const r = makeReq(promptText(), `m-${i}`);
      if (prehash) policy.prepare?.(r.req, workers);
      else tokenizeSamples.push(r.tokenizeUs);
      reqs.push(r.req);
    }
    for (let k = 0; k < reqs.length; k++) {
      const req = reqs[k]!;
      const w0 = performance.now();
      const t0 = process.hrtime.bigint();
      const out = router.route(req, workers);
      const t1 = process.hrtime.bigint();
      windows[2 * (start + k)] = w0;
      windows[2 * (start + k) + 1] = performance.now();
      // Index upkeep deferred to the next idle moment (pick-time predictions, expiry), run and
      // timed here explicitly: it is CPU the gateway spends per request, off the request's path.
      policy.prefixIndex?.maintain();
      times[start + k] = Number(t1 - t0) / 1000;
      deferred[start + k] = Number(process.hrtime.bigint() - t1) / 1000;
      if (out.ok) hit += out.decision.expectedPrefixHit;
      stored(req, out);
      clock.advance(1);
      // The first token confirms the prediction; that index work, too, waits for an idle moment.
      const f0 = process.hrtime.bigint();
      router.firstToken(req.id);
      policy.prefixIndex?.maintain();
      deferred[start + k]! += Number(process.hrtime.bigint() - f0) / 1000;
      router.complete(req.id, out.ok);
    }
  }
  let sum = 0;
  let total = 0;
  for (let i = 0; i < ITER; i++) {
    sum += times[i]!;
    total += times[i]! + deferred[i]!;
  }
  // GC entries arrive asynchronously: let the observer catch up, then set aside the decisions a
  // pause fell into (both windows are in time order, so one merge pass finds the overlaps).
  await new Promise((r) => setTimeout(r, 20));
  const clean: number[] = [];
  let g = 0;
  for (let i = 0; i < ITER; i++) {
    const a = windows[2 * i]!;
    const b = windows[2 * i + 1]!;
    while (g < gcPauses.length && gcPauses[g]![1] < a) g++;
    if (!(g < gcPauses.length && gcPauses[g]![0] <= b)) clean.push(times[i]!);
  }
  const cleanSorted = Float64Array.from(clean).sort();
  times.sort();
  deferred.sort();
  return {
    policy: prehash ? `${name} (prehashed)` : name,
    p50us: quantile(times, 0.5),
    p99us: quantile(times, 0.99),
    p99NoGcUs: quantile(cleanSorted, 0.99),
    gcShare: 1 - clean.length / ITER,
    meanus: sum / ITER,
    deferredP99us: quantile(deferred, 0.99),
    cpuPerRequestUs: total / ITER,
    prefixHitMean: hit / ITER,
  };
}

function indexMemory(): { bytesPerMillion: number; heapBytesPerMillion: number; insertNsPerBlock: number; lookupNsPerBlock: number } {
  const N = 1_000_000;
  gc();
  const before = process.memoryUsage();
  const idx = new PrefixIndex({ maxBytes: 1024 * 1024 * 1024 });
  // Capacities adding up to the blocks inserted: the index sizes itself for what its workers can
  // hold (up to maxBytes), so larger ones would measure room never used.
  for (let w = 0; w < WORKERS; w++) idx.addWorker(`w${w}`, Math.ceil(N / WORKERS));
  // One million (block, worker) entries: 8,000-token prompts (500 blocks) spread over workers.
  const chains: number[][] = [];
  const t0 = process.hrtime.bigint();
  for (let c = 0; c * 500 < N; c++) {
    const hashes = Array.from({ length: 500 }, () => Math.floor(rng() * 2 ** 21) * 2 ** 32 + Math.floor(rng() * 2 ** 32));
    chains.push(hashes);
    idx.insert(`w${c % WORKERS}`, hashes, 'routed', c);
  }
  const insertNs = Number(process.hrtime.bigint() - t0) / N;
  const slots = Array.from({ length: WORKERS }, (_, i) => idx.slotOf(`w${i}`));
  const out = new Int32Array(WORKERS);
  const t1 = process.hrtime.bigint();
  for (const h of chains) idx.matchSlots(h, slots, out, 0);
  const lookupNs = Number(process.hrtime.bigint() - t1) / N;
  const s = idx.stats();
  gc();
  const after = process.memoryUsage();
  // Typed arrays live outside the JS heap, in arrayBuffers.
  const heap = after.arrayBuffers - before.arrayBuffers;
  return {
    bytesPerMillion: (s.bytes / s.nodes) * 1e6,
    heapBytesPerMillion: (heap / s.nodes) * 1e6,
    insertNsPerBlock: insertNs,
    lookupNsPerBlock: lookupNs,
  };
}

/**
 * The machine's own p99 for work of the decision's length: a loop of pure arithmetic, calibrated
 * to take `targetUs` at the median, timed as often as the decisions and between the same
 * tokenizations. Anything above this floor at p99 is the decision's; at or below it, the tail
 * is the host's (interrupts, a shared hypervisor), not the code's.
 */
function noiseFloor(targetUs: number): { p50us: number; p99us: number } {
  let sink = 0;
  const spin = (n: number) => {
    for (let k = 0; k < n; k++) sink += k * 1.0000001;
  };
  let n = 1000;
  for (let round = 0; round < 8; round++) {
    const t = Float64Array.from({ length: 101 }, () => {
      const t0 = process.hrtime.bigint();
      spin(n);
      return Number(process.hrtime.bigint() - t0) / 1000;
    }).sort();
    n = Math.max(100, Math.round((n * targetUs) / Math.max(0.05, t[50]!)));
  }
  const times = new Float64Array(ITER);
  for (let i = 0; i < ITER; i++) {
    makeReq(promptText(), `floor-${i}`);
    const t0 = process.hrtime.bigint();
    spin(n);
    times[i] = Number(process.hrtime.bigint() - t0) / 1000;
  }
  times.sort();
  if (sink === -1) console.log(sink);
  return { p50us: quantile(times, 0.5), p99us: quantile(times, 0.99) };
}

const tokenizeSamples: number[] = [];
const rows: Row[] = [];
for (const p of POLICIES) rows.push(await benchPolicy(p, tokenizeSamples));
// Policies that hash the prompt where the gateway tokenizes (Policy.prepare), as they route live.
for (const p of POLICIES) if (createPolicy(p).prepare) rows.push(await benchPolicy(p, tokenizeSamples, true));
const tok = Float64Array.from(tokenizeSamples).sort();
const floorTarget = rows.find((r) => r.policy === 'kvgate (prehashed)')?.p50us ?? rows[0]!.p50us;
const floor = noiseFloor(floorTarget);
const mem = indexMemory();
/** Times to hash a whole prompt's blocks, sorted. */
const hashTimes = Float64Array.from(hashSamples).sort();

const docs = values['write-docs'] ?? [];
if (docs.length > 0) {
  const n1 = (x: number) => x.toFixed(1);
  const label = (r: Row): string =>
    r.policy === 'kvgate (prehashed)' ? '**kvgate, prehashed (as it routes live)**' : r.policy === 'kvgate' ? 'kvgate, hashing inside the decision' : r.policy.replace(' (prehashed)', ', prehashed');
  // The prehashed rows first: that is how the gateway and the simulation route.
  const ordered = [...rows.filter((r) => r.policy.endsWith('(prehashed)')), ...rows.filter((r) => !r.policy.endsWith('(prehashed)'))];
  const cells = (r: Row): string[] => {
    const c = [label(r), n1(r.p50us), n1(r.p99us), n1(r.deferredP99us), n1(r.cpuPerRequestUs), `${(r.prefixHitMean * 100).toFixed(1)}%`];
    return r.policy === 'kvgate (prehashed)' ? [c[0]!, ...c.slice(1).map((x) => `**${x}**`)] : c;
  };
  const md = [
    '| policy | p50 µs | p99 µs | index upkeep p99 µs (idle time) | CPU per request µs | expected hit |',
    '|---|---:|---:|---:|---:|---:|',
    ...ordered.map((r) => `| ${cells(r).join(' | ')} |`),
    `| host noise floor (arithmetic, same length) | ${n1(floor.p50us)} | ${n1(floor.p99us)} | | | |`,
    '',
    `${PROMPT.toLocaleString('en-US')}-token prompts over ${WORKERS} workers, ${ITER.toLocaleString('en-US')} timed decisions per policy; ` +
      (rows.every((r) => r.gcShare === 0)
        ? 'no garbage collection pause fell into a timed decision. '
        : `a garbage collection pause fell into at most ${(100 * Math.max(...rows.map((r) => r.gcShare))).toFixed(2)}% of a row's timed decisions. `) +
      `Tokenizing a prompt (estimate tokenizer): ${n1(quantile(tok, 0.5))} / ${n1(quantile(tok, 0.99))} µs (p50 / p99); hashing its ${Math.floor(PROMPT / 16)} blocks: ${n1(quantile(hashTimes, 0.5))} / ${n1(quantile(hashTimes, 0.99))} µs. ` +
      `Prefix index: ${(mem.bytesPerMillion / 2 ** 20).toFixed(1)} MiB per million blocks, insert ${mem.insertNsPerBlock.toFixed(0)} ns per block, match ${mem.lookupNsPerBlock.toFixed(0)} ns per prompt block. ` +
      `Load average ${loadavg()[0]!.toFixed(1)} at the end (${availableParallelism()} cores).`,
  ].join('\n');
  process.exitCode = writeGeneratedTables(docs, ['npm run bench -- route', ...process.argv.slice(2)].join(' '), { decisions: md }, 'bench route');
}

if (JSON_OUT) {
  console.log(JSON.stringify({ iterations: ITER, workers: WORKERS, promptTokens: PROMPT, rows, noiseFloor: floor, tokenize: { p50us: quantile(tok, 0.5), p99us: quantile(tok, 0.99) }, hashAllBlocks: { p50us: quantile(hashTimes, 0.5), p99us: quantile(hashTimes, 0.99) }, index: mem }, null, 2));
} else {
  const f = (x: number) => x.toFixed(1).padStart(9);
  console.log(`route decision: ${PROMPT}-token prompt, ${WORKERS} workers, warm indexes, ${ITER} decisions per policy (tokenization excluded)`);
  console.log(`${'policy'.padEnd(26)}${'p50 µs'.padStart(9)}${'p99 µs'.padStart(9)}${'no-GC p99'.padStart(10)}${'mean µs'.padStart(9)}${'idle p99'.padStart(10)}${'cpu/req'.padStart(9)}  expected hit`);
  for (const r of rows) {
    console.log(`${r.policy.padEnd(26)}${f(r.p50us)}${f(r.p99us)} ${f(r.p99NoGcUs)}${f(r.meanus)} ${f(r.deferredP99us)}${f(r.cpuPerRequestUs)}  ${(r.prefixHitMean * 100).toFixed(1)}%`);
  }
  console.log(`${'host noise floor'.padEnd(26)}${f(floor.p50us)}${f(floor.p99us)}`);
  console.log(`${'tokenize (estimate)'.padEnd(26)}${f(quantile(tok, 0.5))}${f(quantile(tok, 0.99))}`);
  console.log(`${'hash all 500 blocks'.padEnd(26)}${f(quantile(hashTimes, 0.5))}${f(quantile(hashTimes, 0.99))}`);
  console.log('p50/p99/mean: Router.route (hashing, lookup, filters, scorers, picker, reservation);');
  console.log(`no-GC p99: the decisions no garbage collection pause fell into (${rows.map((r) => `${r.policy} ${(100 * r.gcShare).toFixed(1)}%`).join(', ')} had one).`);
  console.log('idle p99: index upkeep deferred to idle moments (prediction at the pick, confirmation at the');
  console.log('          first token) per request; cpu/req: decision and upkeep, mean.');
  console.log('prehashed: block hashes computed where the prompt is tokenized (Policy.prepare), before the');
  console.log('           decision, as the gateway and the simulation do; the rows above hash inside it.');
  console.log('host noise floor: arithmetic only, as long as the prehashed decision at p50; its p99 is the host\'s.');
  console.log('');
  console.log(`prefix index: ${(mem.bytesPerMillion / 2 ** 20).toFixed(1)} MiB per million blocks (typed arrays), ${(mem.heapBytesPerMillion / 2 ** 20).toFixed(1)} MiB measured`);
  console.log(`              insert ${mem.insertNsPerBlock.toFixed(0)} ns/block, match ${mem.lookupNsPerBlock.toFixed(0)} ns per prompt block over ${WORKERS} workers (gallop + bisection)`);
}
