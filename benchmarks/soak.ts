/**
 * `npm run soak`: a few minutes of mixed traffic through `kvgate serve` (a child process, so its
 * memory is its own) in front of three simulated workers, showing that the gateway's resident
 * memory stays flat and its in-flight gauge returns to 0. Not part of `npm test`.
 *
 * The traffic, from 24 closed-loop clients: streamed and non-streamed chats, clients that leave
 * mid-stream, malformed bodies, oversized asks, wrong content types. RSS (from /proc), the V8 heap
 * in use and kvgate_inflight_requests are sampled every 5 s.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { benchArgs } from './args.js';
import { ask, CLI, metric, MODEL, sleep, spawnSims, Tally } from './faults/harness.js';

const HELP = `npm run soak -- [options]

Mixed traffic through kvgate serve (a child process) in front of three simulated workers for a
few minutes; reports the gateway's RSS over time and its in-flight gauge after the load.

Options:
  --seconds S    length of the load (default 180)
  --clients N    closed-loop clients (default 24)
  -h, --help     this text
`;

function rssMiB(pid: number): number {
  const m = /VmRSS:\s+(\d+) kB/.exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return m ? Number(m[1]) / 1024 : NaN;
}

function median(xs: number[]): number {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? NaN : s[s.length >> 1]!;
}

async function main(): Promise<number> {
  const { values } = benchArgs('soak', { options: { seconds: { type: 'string' }, clients: { type: 'string' }, help: { type: 'boolean', short: 'h' } } });
  if (values.help) {
    process.stdout.write(HELP);
    return 0;
  }
  const seconds = Number(values.seconds ?? 180);
  const clients = Number(values.clients ?? 24);
  const sims = await spawnSims(3);
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-soak-'));
  const port = 18_000 + Math.floor(Math.random() * 2_000);
  const cfg = join(dir, 'kvgate.json');
  writeFileSync(
    cfg,
    JSON.stringify({
      listen: { host: '127.0.0.1', port },
      pools: [{ name: 'main', model: MODEL, workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
      log: { level: 'warn' },
      shutdown: { drainDelayMs: 0 },
    }),
  );
  const gw = spawn(process.execPath, [CLI, 'serve', '--config', cfg], { stdio: ['ignore', 'ignore', 'inherit'] });
  const url = `http://127.0.0.1:${port}`;
  try {
    for (let i = 0; ; i++) {
      try {
        if ((await fetch(url + '/health')).ok) break;
      } catch {
        if (i > 100) throw new Error('kvgate serve did not start');
      }
      await sleep(100);
    }
    const samples: Array<{ t: number; rss: number; heap: number; inflight: number }> = [];
    const t0 = performance.now();
    const sample = async () => {
      const m = await (await fetch(url + '/metrics')).text();
      samples.push({
        t: (performance.now() - t0) / 1000,
        rss: rssMiB(gw.pid!),
        heap: (metric(m, 'kvgate_nodejs_heap_size_used_bytes') ?? NaN) / 2 ** 20,
        inflight: metric(m, 'kvgate_inflight_requests') ?? NaN,
      });
      const s = samples.at(-1)!;
      process.stdout.write(`t=${s.t.toFixed(0).padStart(4)} s  rss=${s.rss.toFixed(1)} MiB  heap used=${s.heap.toFixed(1)} MiB  inflight=${s.inflight}\n`);
    };
    await sample();
    const sampler = setInterval(() => void sample(), 5_000);
    const tally = new Tally();
    const end = performance.now() + seconds * 1000;
    await Promise.all(
      Array.from({ length: clients }, async (_, c) => {
        for (let n = 0; performance.now() < end; n++) {
          const kind = (c * 7 + n) % 10;
          const messages = [{ role: 'user', content: `client ${c} request ${n} ${'context '.repeat(n % 50)}` }];
          if (kind === 9) {
            // Leaves mid-stream.
            const ac = new AbortController();
            try {
              const r = await fetch(url + '/v1/chat/completions', { method: 'POST', headers: { 'content-type': 'application/json' }, body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 200, messages }), signal: ac.signal });
              await r.body!.getReader().read();
              tally.add({ kind: 'ok', detail: 'left', status: r.status, ms: 0, end: 0, text: '' });
            } catch (e) {
              tally.add({ kind: 'unanswered', detail: (e as Error).message, status: 0, ms: 0, end: 0, text: '' });
            }
            ac.abort();
            continue;
          }
          const o =
            kind === 8
              ? await ask(url, { raw: '{"model": "x", "messages": [', headers: {} })
              : kind === 7
                ? await ask(url, { body: { model: MODEL, n: 64, max_tokens: 5_000, messages } })
                : kind === 6
                  ? await ask(url, { raw: JSON.stringify({ model: MODEL, messages }), headers: { 'content-type': 'text/plain' } })
                  : await ask(url, { body: { model: MODEL, stream: kind % 2 === 0, max_tokens: 16 + (n % 32), messages } });
          tally.add(o);
        }
      }),
    );
    await sleep(2_000);
    clearInterval(sampler);
    await sample();
    // The first and the last minute of load (after 10 s of warm-up). The heap's lowest sample in a
    // window is what survived garbage collection: live objects, the measure of a leak. RSS also
    // holds memory V8 keeps after collecting, so it is shown but judged loosely.
    const win = (from: number, to: number) => samples.filter((s) => s.t > from && s.t <= to);
    const first = win(10, 70);
    const last = win(seconds - 60, seconds + 5);
    const inflightAfter = samples.at(-1)!.inflight;
    const minHeap = (xs: typeof samples) => Math.min(...xs.map((s) => s.heap));
    process.stdout.write(
      `\nrequests: sent=${tally.sent} ok=${tally.ok} errors=${tally.errors} unanswered=${tally.unanswered}\n` +
        `rss median, first minute after warm-up: ${median(first.map((s) => s.rss)).toFixed(1)} MiB; last minute: ${median(last.map((s) => s.rss)).toFixed(1)} MiB; peak ${Math.max(...samples.map((s) => s.rss)).toFixed(1)} MiB\n` +
        `heap used, lowest sample, first minute: ${minHeap(first).toFixed(1)} MiB; last minute: ${minHeap(last).toFixed(1)} MiB\n` +
        `in-flight gauge after the load: ${inflightAfter}\n`,
    );
    const heapGrew = minHeap(last) - minHeap(first);
    const rssGrew = median(last.map((s) => s.rss)) - median(first.map((s) => s.rss));
    const flat = !(heapGrew > Math.max(8, 0.25 * minHeap(first))) && !(rssGrew > Math.max(32, 0.3 * median(first.map((s) => s.rss))));
    process.stdout.write(
      `soak: memory ${flat ? 'flat' : 'GROWING'} (heap ${heapGrew >= 0 ? '+' : ''}${heapGrew.toFixed(1)} MiB, rss ${rssGrew >= 0 ? '+' : ''}${rssGrew.toFixed(1)} MiB), inflight=${inflightAfter}, unanswered=${tally.unanswered}\n`,
    );
    return flat && inflightAfter === 0 && tally.unanswered === 0 ? 0 : 1;
  } finally {
    gw.kill('SIGINT');
    await Promise.all(sims.map((s) => s.stop()));
    rmSync(dir, { recursive: true, force: true });
  }
}

main().then(
  (code) => process.exit(code),
  (e) => {
    process.stderr.write(`${(e as Error).stack ?? e}\n`);
    process.exit(1);
  },
);
