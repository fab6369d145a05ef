/**
 * `npm run bench -- cascade`: the speculative cascade against target-only generation, live, on
 * simulated workers — one target (llama-3.1-70b, TP 4 on H100) and one draft (llama-3.1-8b, int4
 * weights by default, on an A10G) whose acceptance at temperature 1 is set to each α in turn — through a real gateway.
 *
 * Requests are sent one at a time (batch 1: the regime where speculation helps most), each a
 * ~150-token prompt asking for up to 128 tokens at temperature 1 with a seed. The same requests
 * go to the target directly (target-only). Each engine's modelled step time is summed, so the
 * figures are modelled GPU time, not the wall clock of a compressed simulation:
 *   - target GPU-ms / token: the target's busy time per output token (TP 4: ×4 GPU-ms);
 *   - draft GPU-ms / token: the same for the draft;
 *   - $/M tokens: (target GPU-s × 4 × $3.5/h + draft GPU-s × $1.0/h) per million output tokens,
 *     at batch 1 — an upper bound on what a token costs, since a busy GPU shares each step;
 *   - modelled ms / token: (draft + target busy time) / tokens: the time per token a lone
 *     request sees, gateway and HTTP overhead excluded;
 *   - α̂, tokens per round and the share of tokens that came from the draft, from kvgate's metrics.
 * The verification pass asks for prompt_logprobs, for which vLLM V1 (and so the simulation)
 * computes the whole context again each round: that cost is included.
 *
 * Two modes per α: fixed k, and the adaptive controller pricing draft time at $1.0 and target
 * time at 4 × $3.5 per GPU-hour, with the wall-clock time of a target-only token measured in the
 * target-only run as its baseline (the workers run at --speed 4 so that call times are mostly
 * modelled GPU time). "adaptive (p/n plain)" counts the requests the controller sent straight to
 * the target.
 */
import { benchArgs } from './args.js';
import { parseConfig } from '../src/config/index.js';
import { createGateway } from '../src/gateway/gateway.js';
import { startSimWorker, type SimWorker } from '../src/sim/worker/server.js';
import { createLogger } from '../src/telemetry/logger.js';
import { estimateTokenizer } from '../src/tokenizer/index.js';
import { writeGeneratedTables } from './doc-tables.js';

const HELP = `npm run bench -- cascade [options]

The speculative cascade against target-only generation on simulated workers (modelled GPU time).

Options:
  --requests N     requests per acceptance rate (default 20)
  --max-tokens N   output tokens asked per request (default 128)
  --k K            draft tokens per round (default 4)
  --alphas LIST    acceptance rates at temperature 1 (default 0.3,0.5,0.7,0.9)
  --temperature T  sampling temperature of the requests (default 1)
  --draft-quant Q  weight dtype of the draft: bf16, fp8, int4 (default int4)
  --modes LIST     fixed (k = --k every round) and/or adaptive (the controller, pricing draft and
                   target time at $1.0 and 4 × $3.5 per GPU-hour) (default fixed,adaptive)
  --speed X        the workers' time compression (default 4: the controller measures wall-clock
                   call times, which must be mostly modelled time, not HTTP overhead)
  --write-docs FILE  rewrite this command's generated table (live) in FILE (repeatable)
  -h, --help       this text
`;

const TARGET = 'llama-3.1-70b';
const DRAFT = 'llama-3.1-8b';
const TP = 4;
const PRICE = { h100: 3.5, a10g: 1.0 };

/** Sum the engine's modelled step time (ms) from now on. */
function meter(w: SimWorker): { ms: () => number; reset: () => void } {
  let total = 0;
  const engine = w.engine as { step: () => { durationMs: number } | null };
  const step = engine.step.bind(engine);
  engine.step = () => {
    const r = step();
    if (r) total += r.durationMs;
    return r;
  };
  return { ms: () => total, reset: () => void (total = 0) };
}

function metric(text: string, name: string, labels: string): number {
  for (const line of text.split('\n')) if (line.startsWith(`${name}{`) && line.includes(labels)) return Number(line.slice(line.lastIndexOf(' ') + 1));
  return 0;
}

async function main(): Promise<void> {
  const { values } = benchArgs('cascade', {
    options: {
      requests: { type: 'string' },
      'max-tokens': { type: 'string' },
      k: { type: 'string' },
      alphas: { type: 'string' },
      temperature: { type: 'string' },
      'draft-quant': { type: 'string' },
      modes: { type: 'string' },
      speed: { type: 'string' },
      'write-docs': { type: 'string', multiple: true },
      help: { type: 'boolean', short: 'h' },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return;
  }
  const n = Number(values.requests ?? 20);
  const maxTokens = Number(values['max-tokens'] ?? 128);
  const k = Number(values.k ?? 4);
  const temperature = Number(values.temperature ?? 1);
  const draftQuant = (values['draft-quant'] ?? 'int4') as 'bf16' | 'fp8' | 'int4';
  const modes = (values.modes ?? 'fixed,adaptive').split(',') as Array<'fixed' | 'adaptive'>;
  const speed = Number(values.speed ?? 4);
  const alphas = (values.alphas ?? '0.3,0.5,0.7,0.9').split(',').map(Number);
  const prompts = Array.from({ length: n }, (_, i) =>
    estimateTokenizer.encode(`Request ${i}: ` + 'the harbour town woke slowly as the boats came back with the tide and the market opened '.repeat(8)),
  );

  const target = await startSimWorker({ model: TARGET, tp: TP, gpu: 'h100', speed });
  const tm = meter(target);
  process.stdout.write(`cascade k=${k} (draft ${DRAFT} ${draftQuant} on a10g) vs target-only: ${n} requests × ${maxTokens} tokens at temperature ${temperature}, batch 1, modelled GPU time\n`);
  // The table, printed row by row as it is measured and kept for --write-docs.
  const table: string[] = [];
  const row = (line: string): void => {
    table.push(line);
    process.stdout.write(`${line}\n`);
  };
  row('| mode | α (set) | α̂ | tokens/round | from draft | target GPU-ms/token | draft GPU-ms/token | $/M tokens | modelled ms/token |');
  row('|---|---|---|---|---|---|---|---|---|');

  // Target-only, once.
  tm.reset();
  let tokens = 0;
  const wall0 = performance.now();
  for (let i = 0; i < n; i++) {
    const r = await fetch(`${target.url}/v1/completions`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ model: TARGET, prompt: prompts[i], max_tokens: maxTokens, temperature, seed: i }),
    });
    tokens += ((await r.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens;
  }
  const baseGpu = (tm.ms() * TP) / tokens;
  const baseCost = ((tm.ms() / 1000) * TP * PRICE.h100) / 3600 / tokens * 1e6;
  // What a target-only token costs in wall-clock time here: the adaptive controller's baseline.
  const targetTokenMs = (performance.now() - wall0) / tokens;
  row(`| target-only | – | – | 1 | 0% | ${baseGpu.toFixed(1)} | 0 | ${baseCost.toFixed(2)} | ${(tm.ms() / tokens).toFixed(1)} |`);

  for (const mode of modes)
  for (const alpha of alphas) {
    const draft = await startSimWorker({ model: DRAFT, gpu: 'a10g', weightDtype: draftQuant, speed, draftOf: TARGET, draftAcceptance: alpha });
    const dm = meter(draft);
    const gw = createGateway(
      parseConfig({
        listen: { host: '127.0.0.1', port: 0 },
        pools: [
          { name: 'target', model: TARGET, workers: [{ url: target.url, id: 't0' }] },
          { name: 'draft', model: DRAFT, workers: [{ url: draft.url, id: 'd0' }] },
        ],
        log: { level: 'silent' },
        speculative: {
          cascades: [{ model: TARGET, targetPool: 'target', draftPool: 'draft', k }],
          controller: { mode, draftPrice: PRICE.a10g, targetPrice: TP * PRICE.h100, targetTokenMs, minEvidence: 20 },
        },
      }),
      { logger: createLogger({ level: 'silent' }) },
    );
    const { url } = await gw.start();
    tm.reset();
    dm.reset();
    let out = 0;
    for (let i = 0; i < n; i++) {
      const r = await fetch(`${url}/v1/completions`, {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: TARGET, prompt: prompts[i], max_tokens: maxTokens, temperature, seed: i }),
      });
      out += ((await r.json()) as { usage: { completion_tokens: number } }).usage.completion_tokens;
    }
    const m = await (await fetch(`${url}/metrics`)).text();
    const a = metric(m, 'kvgate_spec_acceptance_rate', 'class="default"');
    const plainReqs = m.split('\n').filter((l) => l.startsWith('kvgate_spec_requests_total{') && l.includes('path="plain"')).reduce((acc, l) => acc + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    const rounds = metric(m, 'kvgate_spec_rounds_total', `model="${TARGET}"`);
    const fromDraft = metric(m, 'kvgate_spec_tokens_total', 'source="draft"');
    const fromTarget = metric(m, 'kvgate_spec_tokens_total', 'source="target"');
    const tGpu = (tm.ms() * TP) / out;
    const dGpu = dm.ms() / out;
    const cost = (((tm.ms() / 1000) * TP * PRICE.h100 + (dm.ms() / 1000) * PRICE.a10g) / 3600 / out) * 1e6;
    // Each round yields its accepted draft tokens and one more from the target (correction or bonus);
    // plain requests' tokens (counted under source="target") are no round's.
    const accepted = m.split('\n').filter((l) => l.startsWith('kvgate_spec_accepted_tokens_total{')).reduce((acc, l) => acc + Number(l.slice(l.lastIndexOf(' ') + 1)), 0);
    const perRound = rounds > 0 ? ((accepted + rounds) / rounds).toFixed(2) : '–';
    const share = fromDraft + fromTarget > 0 ? ((100 * fromDraft) / out).toFixed(0) : '0';
    row(
      `| ${mode === 'fixed' ? `fixed k=${k}` : `adaptive (${plainReqs}/${n} plain)`} | ${alpha} | ${a.toFixed(2)} | ${perRound} | ${share}% | ` +
        `${tGpu.toFixed(1)} | ${dGpu.toFixed(1)} | ${cost.toFixed(2)} | ${((tm.ms() + dm.ms()) / out).toFixed(1)} |`,
    );
    await gw.close();
    await draft.close();
  }
  await target.close();
  const docs = values['write-docs'] ?? [];
  if (docs.length > 0) writeGeneratedTables(docs, ['npm run bench -- cascade', ...process.argv.slice(2)].join(' '), { live: table.join('\n') }, 'bench cascade');
}

main().catch((e) => {
  process.stderr.write(`${(e as Error).stack ?? e}\n`);
  process.exit(1);
});
