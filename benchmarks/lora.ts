/**
 * `npm run bench -- lora`: requests for many LoRA adapters on workers that batch only a few at once
 * (vLLM --max-loras), placed by kvgate with and without its LoRA affinity, by llm-d's default
 * profile and its legacy blend with a lora-affinity-scorer, and by load alone.
 *
 * Simulated workers in real time (the modelled GPU's step times) serve a base model and N
 * adapters, --max-loras M each. Streamed chat requests arrive as a Poisson process; each names an
 * adapter drawn with Zipf weights (1/rank: a few popular adapters, a long tail), with that
 * adapter's own system prompt, a short question and a random output budget. The same requests,
 * at the same times, go through a fresh gateway and fresh workers for each policy in turn. A
 * request whose adapter finds the worker's slots held by other adapters waits in the engine until
 * one is free, however idle the worker is otherwise: that wait is what placement decides.
 *
 * Printed per policy: time to first token p50 / p90 / p99, end to end p50 / p99 (ms, wall clock:
 * the workers run at the modelled speed), the requests that failed, and TTFT p99 ÷ kvgate's.
 */
import { benchArgs } from './args.js';
import { parseConfig } from '../src/config/index.js';
import { createGateway } from '../src/gateway/gateway.js';
import { startSimWorker, type SimWorker } from '../src/sim/worker/server.js';
import { createLogger } from '../src/telemetry/logger.js';
import { seededRng } from '../src/util/rng.js';
import { quantile } from './harness.js';

const HELP = `npm run bench -- lora [options]

LoRA adapter placement: kvgate with its LoRA affinity, without it, and policies that place by
load alone, on simulated workers with vLLM's --max-loras.

Options:
  --workers N      simulated workers (default 4)
  --adapters N     LoRA adapters served by every worker (default 8)
  --max-loras N    adapters one worker batches at once (vLLM --max-loras; default 2)
  --rate R         requests per second, Poisson (default 16)
  --seconds S      length of the arrival schedule (default 30)
  --seed N         seed of the schedule (default 1)
  --policies LIST  comma-separated (default kvgate,kvgate-no-affinity,llm-d,llm-d-lora,least-load,
                   round-robin; kvgate-no-affinity is kvgate with loraAffinity false, llm-d-lora
                   llm-d-legacy with its lora-affinity-scorer at weight 1, loraWeight 1)
  -h, --help       this text
`;

const MODEL = 'llama-3.1-8b';

/** Named variants: a policy with options. */
const VARIANTS: Record<string, { name: string; options: Record<string, unknown> }> = {
  'kvgate-no-affinity': { name: 'kvgate', options: { loraAffinity: false } },
  'llm-d-lora': { name: 'llm-d-legacy', options: { loraWeight: 1 } },
};

interface Planned {
  at: number;
  adapter: string;
  question: string;
  maxTokens: number;
}

interface Outcome {
  ttft: number;
  e2e: number;
  ok: boolean;
}

function plan(adapters: string[], rate: number, seconds: number, seed: number): Planned[] {
  const rng = seededRng(seed);
  const weights = adapters.map((_, i) => 1 / (i + 1));
  const total = weights.reduce((a, b) => a + b, 0);
  const out: Planned[] = [];
  for (let t = -Math.log(1 - rng()) / rate; t < seconds; t += -Math.log(1 - rng()) / rate) {
    let u = rng() * total;
    let k = 0;
    while (u > weights[k]! && k < adapters.length - 1) u -= weights[k++]!;
    out.push({ at: t * 1000, adapter: adapters[k]!, question: `Question ${out.length}: what changed in report ${Math.floor(rng() * 1e6)}?`, maxTokens: 32 + Math.floor(rng() * 160) });
  }
  return out;
}

/** One adapter's system prompt: a few hundred tokens of its own instructions. */
function systemPrompt(adapter: string): string {
  return `You are the ${adapter} assistant. Answer in the ${adapter} house style, citing the ${adapter} handbook. `.repeat(24);
}

async function send(url: string, p: Planned): Promise<Outcome> {
  const t0 = performance.now();
  try {
    const res = await fetch(url + '/v1/chat/completions', {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({
        model: p.adapter,
        stream: true,
        max_tokens: p.maxTokens,
        messages: [{ role: 'system', content: systemPrompt(p.adapter) }, { role: 'user', content: p.question }],
      }),
    });
    let ttft = -1;
    for await (const chunk of res.body!) {
      if (ttft < 0 && (chunk as Uint8Array).length > 0) ttft = performance.now() - t0;
    }
    return { ttft, e2e: performance.now() - t0, ok: res.status === 200 && ttft >= 0 };
  } catch {
    return { ttft: -1, e2e: performance.now() - t0, ok: false };
  }
}

async function runPolicy(policy: string, o: { workers: number; adapters: string[]; maxLoras: number }, schedule: Planned[]): Promise<Outcome[]> {
  const sims: SimWorker[] = [];
  for (let i = 0; i < o.workers; i++) sims.push(await startSimWorker({ port: 0, model: MODEL, adapters: o.adapters, maxLoras: o.maxLoras, speed: 1 }));
  const gw = createGateway(
    parseConfig({
      listen: { host: '127.0.0.1', port: 0 },
      pools: [{ name: 'lora', model: MODEL, adapters: o.adapters, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
      policy: VARIANTS[policy] ?? { name: policy },
      log: { level: 'silent' },
    }),
    { logger: createLogger({ level: 'silent' }) },
  );
  try {
    const { url } = await gw.start();
    // Until every worker has been scraped once (its --max-loras and adapters known).
    const until = Date.now() + 10_000;
    while (gw.registry.workers.some((w) => w.snapshot === null) && Date.now() < until) await new Promise((r) => setTimeout(r, 50));
    const start = performance.now();
    return await Promise.all(
      schedule.map(async (p) => {
        const wait = p.at - (performance.now() - start);
        if (wait > 0) await new Promise((r) => setTimeout(r, wait));
        return send(url, p);
      }),
    );
  } finally {
    await gw.close();
    await Promise.all(sims.map((s) => s.close()));
  }
}

async function main(): Promise<number> {
  const { values } = benchArgs('lora', {
    options: {
      workers: { type: 'string', default: '4' },
      adapters: { type: 'string', default: '8' },
      'max-loras': { type: 'string', default: '2' },
      rate: { type: 'string', default: '16' },
      seconds: { type: 'string', default: '30' },
      seed: { type: 'string', default: '1' },
      policies: { type: 'string', default: 'kvgate,kvgate-no-affinity,llm-d,llm-d-lora,least-load,round-robin' },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const [workers, nAdapters, maxLoras, seed] = [values.workers, values.adapters, values['max-loras'], values.seed].map(Number) as [number, number, number, number];
  const [rate, seconds] = [Number(values.rate), Number(values.seconds)];
  if (![workers, nAdapters, maxLoras].every((x) => Number.isInteger(x) && x > 0) || !Number.isInteger(seed) || !(rate > 0) || !(seconds > 0)) {
    process.stderr.write('bench lora: --workers, --adapters and --max-loras take positive whole numbers, --seed a whole number, --rate and --seconds positive numbers\n');
    return 2;
  }
  const policies = values.policies.split(',').map((p) => p.trim());
  const adapters = Array.from({ length: nAdapters }, (_, i) => `lora-${i}`);
  const schedule = plan(adapters, rate, seconds, seed);
  process.stdout.write(`bench lora: ${workers} workers (${MODEL}, H100, real time), ${nAdapters} adapters (Zipf), --max-loras ${maxLoras}, ${schedule.length} streamed requests at ${rate}/s over ${seconds} s, seed ${seed}\n\n`);
  const rows: Array<{ policy: string; ttft: number[]; e2e: number[]; failed: number }> = [];
  for (const policy of policies) {
    const out = await runPolicy(policy, { workers, adapters, maxLoras }, schedule);
    const ok = out.filter((r) => r.ok);
    rows.push({ policy, ttft: ok.map((r) => r.ttft), e2e: ok.map((r) => r.e2e), failed: out.length - ok.length });
  }
  const base = rows.find((r) => r.policy === 'kvgate');
  const f = (x: number) => x.toFixed(0);
  process.stdout.write('| policy | TTFT p50 ms | TTFT p90 ms | TTFT p99 ms | E2E p50 ms | E2E p99 ms | failed | TTFT p99 ÷ kvgate |\n|---|---:|---:|---:|---:|---:|---:|---:|\n');
  for (const r of rows) {
    const p99 = quantile(r.ttft, 0.99);
    const ratio = base !== undefined && base.ttft.length > 0 ? (p99 / quantile(base.ttft, 0.99)).toFixed(2) : '—';
    process.stdout.write(
      `| ${r.policy} | ${f(quantile(r.ttft, 0.5))} | ${f(quantile(r.ttft, 0.9))} | ${f(p99)} | ${f(quantile(r.e2e, 0.5))} | ${f(quantile(r.e2e, 0.99))} | ${r.failed} | ${ratio} |\n`,
    );
  }
  return 0;
}

main().then(
  (code) => process.exit(code),
  (e: unknown) => {
    process.stderr.write(`bench lora: ${(e as Error).stack ?? String(e)}\n`);
    process.exit(1);
  },
);
