/**
 * `npm run bench -- ab --baseline DIR`: this checkout's gateway against another build, side by
 * side, in CPU time per request (or one build under two configs: --config, --baseline-config).
 *
 * On a small shared machine two runs of the same build one after the other differ by 10–15% in
 * CPU per request, more than most single changes to the request path are worth. Here both
 * gateways run at once, each in front of the same stand-in worker and each under its own paced
 * wrk load (the same rate), so whatever else the machine does slows both alike; the figure is the
 * ratio of their CPU time per request, round by round. Paced, not saturating: a saturated gateway
 * takes all the CPU it can get, and the two would compete for it. `--baseline .` compares the
 * checkout with itself and shows the method's own spread.
 */
import { existsSync } from 'node:fs';
import { resolve } from 'node:path';
import { benchArgs } from './args.js';
import { median, quantile, treeCpuMs } from './harness.js';
import type { RateResult } from './overhead/client.js';
import { nodeClient, promptBody, setUpTools, startKvgate, startStandIn, wrk, BODY, type Target } from './overhead/targets.js';

const HELP = `npm run bench -- ab --baseline DIR [options]

This checkout's kvgate against the build in DIR (a checkout with dist/ built: npm run build),
both at once, each under the same paced wrk load, in front of the same stand-in worker.
Prints each round's CPU time per request of both and the ratio (this / baseline).

Options:
  --baseline DIR     the other checkout (required; '.' compares this one with itself)
  --rounds N         rounds, each with freshly started gateways (default 4)
  --seconds S        measurement per round (default 8; 2 s of warm-up before it)
  --connections C    wrk connections per gateway (default 16)
  --delay-ms D       pause of each connection before each request (default 4: ≈3,000 req/s each)
  --policy NAME      routing policy of both (default: the gateway's default)
  --prompt-tokens N  send a chat request with an N-token prompt instead of 'Say hello.' (prose
                     of made-up words, mostly outside the estimate tokenizer's vocabulary, the
                     same every time); a long prompt costs milliseconds of CPU: lower the rate
                     (e.g. --connections 4 --delay-ms 10)
  --stream RATE      streamed requests instead (64-event SSE answers, a Node client at RATE
                     streams/s per gateway, open loop): CPU per stream, and time to first byte
                     and total time p50 of both
  --config JSON      config merged into this checkout's gateway's (top-level keys replace the
                     benchmark's), e.g. '{"upstream":{"client":"undici"}}'
  --baseline-config JSON   the same for the baseline's; with --baseline . the two configs of
                     one build are compared
  --node-flags="F ..."  flags for this side's node (e.g. --node-flags=--max-semi-space-size=32)
  --baseline-node-flags="F ..."  the same for the baseline's
  --no-install       do not install wrk or nginx even as root
  -h, --help         this text
`;

function cpuMs(t: Target): number {
  return t.pids.reduce((s, p) => s + (treeCpuMs(p) ?? NaN), 0);
}

async function main(): Promise<number> {
  const { values } = benchArgs('ab', {
    options: {
      baseline: { type: 'string' },
      rounds: { type: 'string', default: '4' },
      seconds: { type: 'string', default: '8' },
      connections: { type: 'string', default: '16' },
      'delay-ms': { type: 'string', default: '4' },
      policy: { type: 'string' },
      'prompt-tokens': { type: 'string' },
      stream: { type: 'string' },
      config: { type: 'string' },
      'baseline-config': { type: 'string' },
      'node-flags': { type: 'string' },
      'baseline-node-flags': { type: 'string' },
      'no-install': { type: 'boolean', default: false },
      help: { type: 'boolean', short: 'h', default: false },
    },
  });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const [rounds, seconds, connections, delayMs] = [values.rounds, values.seconds, values.connections, values['delay-ms']].map(Number) as [number, number, number, number];
  if (![rounds, seconds, connections].every((x) => Number.isInteger(x) && x > 0) || !(Number.isInteger(delayMs) && delayMs >= 0)) {
    process.stderr.write('bench ab: --rounds, --seconds and --connections take positive whole numbers, --delay-ms a whole number ≥ 0\n');
    return 2;
  }
  if (!values.baseline) {
    process.stderr.write('bench ab: --baseline DIR is required (a kvgate checkout with dist/ built)\n');
    return 2;
  }
  const baselineCli = resolve(values.baseline, 'dist', 'src', 'cli.js');
  if (!existsSync(baselineCli)) {
    process.stderr.write(`bench ab: ${baselineCli} not found: build the baseline first (npm run build in ${values.baseline})\n`);
    return 2;
  }
  const configs: Array<Record<string, unknown> | undefined> = [];
  for (const [flag, text] of [['--baseline-config', values['baseline-config']], ['--config', values.config]] as const) {
    let parsed: unknown;
    try {
      parsed = text === undefined ? undefined : JSON.parse(text);
    } catch (e) {
      process.stderr.write(`bench ab: ${flag} is not JSON: ${(e as Error).message}\n`);
      return 2;
    }
    if (parsed !== undefined && (parsed === null || typeof parsed !== 'object' || Array.isArray(parsed))) {
      process.stderr.write(`bench ab: ${flag} takes a JSON object of config keys\n`);
      return 2;
    }
    configs.push(parsed as Record<string, unknown> | undefined);
  }
  const [baselineConfig, thisConfig] = configs;
  const flags = (v: string | undefined): string[] => (v ?? '').split(/\s+/).filter((f) => f !== '');
  const streamRate = values.stream === undefined ? 0 : Number(values.stream);
  if (values.stream !== undefined && !(Number.isFinite(streamRate) && streamRate > 0)) {
    process.stderr.write('bench ab: --stream takes a rate in streams per second, > 0\n');
    return 2;
  }
  const promptTokens = values['prompt-tokens'] === undefined ? 0 : Number(values['prompt-tokens']);
  if (values['prompt-tokens'] !== undefined && !(Number.isInteger(promptTokens) && promptTokens > 0 && promptTokens <= 20_000)) {
    process.stderr.write('bench ab: --prompt-tokens takes a whole number of tokens from 1 to 20000\n');
    return 2;
  }
  if (promptTokens > 0 && streamRate > 0) {
    process.stderr.write('bench ab: --prompt-tokens applies to the non-streaming load only\n');
    return 2;
  }
  const body = promptTokens > 0 ? promptBody(promptTokens) : BODY;
  /** One load on both gateways at once: requests served, and the latencies (ms). */
  const load = async (a: Target, b: Target, s: number): Promise<Array<{ requests: number; ttfb50: number; total50: number }>> => {
    if (streamRate === 0) {
      const rs = await Promise.all([wrk(a.url, connections, s, delayMs, body), wrk(b.url, connections, s, delayMs, body)]);
      return rs.map((r) => ({ requests: r.requests, ttfb50: NaN, total50: r.p50_us / 1000 }));
    }
    const rs = await Promise.all(
      [a, b].map((t) => nodeClient<RateResult>({ mode: 'rate', url: t.url, stream: true, rate: streamRate, durationMs: s * 1000 })),
    );
    return rs.map((r) => ({ requests: r.sent - r.errors, ttfb50: quantile(r.ttfb, 0.5), total50: quantile(r.latencies, 0.5) }));
  };
  const tools = setUpTools(!values['no-install']);
  if (!tools.useWrk) {
    process.stderr.write('bench ab: needs wrk (Debian: apt-get install wrk)\n');
    return 2;
  }
  const direct = await startStandIn(tools.cUpstream);
  const rows: Array<{ a: number; b: number; aReq: number; bReq: number; aLat: string; bLat: string }> = [];
  try {
    for (let r = 0; r < rounds; r++) {
      const a = await startKvgate(direct.url, { name: 'baseline', cli: baselineCli, policy: values.policy, config: baselineConfig, nodeFlags: flags(values['baseline-node-flags']) });
      let b: Target | null = null;
      try {
        b = await startKvgate(direct.url, { name: 'this', policy: values.policy, config: thisConfig, nodeFlags: flags(values['node-flags']) });
        await load(a, b, 2);
        const a0 = cpuMs(a);
        const b0 = cpuMs(b);
        const [wa, wb] = await load(a, b, seconds);
        const row = {
          a: ((cpuMs(a) - a0) * 1000) / Math.max(1, wa!.requests),
          b: ((cpuMs(b) - b0) * 1000) / Math.max(1, wb!.requests),
          aReq: wa!.requests,
          bReq: wb!.requests,
          aLat: streamRate > 0 ? `${wa!.ttfb50.toFixed(2)} / ${wa!.total50.toFixed(2)}` : wa!.total50.toFixed(2),
          bLat: streamRate > 0 ? `${wb!.ttfb50.toFixed(2)} / ${wb!.total50.toFixed(2)}` : wb!.total50.toFixed(2),
        };
        rows.push(row);
        process.stderr.write(`round ${r + 1}/${rounds}: baseline ${row.a.toFixed(1)} µs/req, this ${row.b.toFixed(1)} µs/req, ratio ${(row.b / row.a).toFixed(3)}\n`);
      } finally {
        await a.stop();
        await b?.stop();
      }
    }
  } finally {
    await direct.stop();
  }
  const ratios = rows.map((x) => x.b / x.a);
  const loadText =
    streamRate > 0
      ? `${streamRate} streams/s per gateway (64-event SSE)`
      : `${connections} connections × ${delayMs} ms pauses per gateway${promptTokens > 0 ? `, ${promptTokens}-token prompts` : ''}`;
  const lat = streamRate > 0;
  process.stdout.write(
    `\nbench ab: ${rounds} round(s) × ${seconds} s, ${loadText}, stand-in ${tools.cUpstream ? 'nginx (C)' : 'Node'}\n\n` +
      (lat
        ? '| round | baseline streams | baseline CPU µs/stream | TTFB / total p50 ms | this streams | this CPU µs/stream | TTFB / total p50 ms | this / baseline |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n'
        : '| round | baseline req | baseline CPU µs/req | p50 ms | this req | this CPU µs/req | p50 ms | this / baseline |\n|---:|---:|---:|---:|---:|---:|---:|---:|\n') +
      rows
        .map((x, i) =>
          lat
            ? `| ${i + 1} | ${x.aReq} | ${x.a.toFixed(1)} | ${x.aLat} | ${x.bReq} | ${x.b.toFixed(1)} | ${x.bLat} | ${(x.b / x.a).toFixed(3)} |`
            : `| ${i + 1} | ${x.aReq} | ${x.a.toFixed(1)} | ${x.aLat} | ${x.bReq} | ${x.b.toFixed(1)} | ${x.bLat} | ${(x.b / x.a).toFixed(3)} |`,
        )
        .join('\n') +
      `\n\nmedian ratio ${median(ratios).toFixed(3)} (range ${Math.min(...ratios).toFixed(3)}–${Math.max(...ratios).toFixed(3)})\n`,
  );
  return 0;
}

main().then(
  (code) => (process.exitCode = code),
  (err: unknown) => {
    process.stderr.write(`bench ab: ${(err as Error).stack ?? String(err)}\n`);
    process.exitCode = 1;
  },
);
