/**
 * The processes bench overhead and bench profile measure: the stand-in worker (nginx with the echo
 * module, or the Node one), nginx as a proxy, the bare Node hop, kvgate; and the load generators
 * (wrk, or the Node client).
 */
import { fork, spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, mkdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import { seededRng } from '../../src/util/rng.js';
import { freePort, stopChild, waitReady } from '../harness.js';
import type { Spec } from './client.js';
import { ECHO_MODULE, upstreamConf } from './nginx.js';

const here = dirname(fileURLToPath(import.meta.url));
const cliPath = join(here, '..', '..', 'src', 'cli.js');

/** The request every non-streaming measurement sends. */
export const BODY = JSON.stringify({ model: 'bench-model', messages: [{ role: 'user', content: 'Say hello.' }], max_tokens: 16 });

/**
 * Prose of `tokens` tokens (by the estimate tokenizer), the same for the same seed: sentences of
 * words drawn with a Zipf-like skew from 20,000 made-up ones (one made-up language for every seed),
 * as real prose is mostly words outside the estimate tokenizer's small vocabulary, with numbers and
 * punctuation.
 */
export function proseText(tokens: number, seed = 7): string {
  const lexiconRand = seededRng(7);
  const letters = 'etaoinshrdlcumwfgypbvkjxqz';
  const lexicon = Array.from({ length: 20_000 }, () => {
    let w = '';
    const n = 2 + Math.floor(lexiconRand() * 9);
    for (let i = 0; i < n; i++) w += letters[Math.min(25, Math.floor(-Math.log(1 - lexiconRand()) * 6))];
    return w;
  });
  // Seed 7 draws on from the lexicon's generator (the prompt bench ab --prompt-tokens has sent).
  const rand = seed === 7 ? lexiconRand : seededRng(seed);
  const word = (): string => lexicon[Math.min(lexicon.length - 1, Math.floor(Math.exp(rand() * Math.log(lexicon.length))) - 1)]!;
  const parts: string[] = [];
  let count = 0;
  for (let i = 0; count < tokens; i++) {
    const w = word();
    const piece = i % 15 === 0 ? ` ${w[0]!.toUpperCase()}${w.slice(1)}` : i % 40 === 7 ? ` ${Math.floor(rand() * 5000)},` : i % 15 === 14 ? ` ${w}.` : ` ${w}`;
    parts.push(piece);
    count += estimateTokenizer.count(piece);
  }
  return parts.join('').trim();
}

/** A chat request whose prompt is `tokens` tokens of prose (proseText), the same every time. */
export function promptBody(tokens: number): string {
  return JSON.stringify({ model: 'bench-model', messages: [{ role: 'user', content: proseText(tokens) }], max_tokens: 16 });
}

export interface Target {
  name: string;
  url: string;
  /** Processes whose CPU time is the target's. */
  pids: number[];
  stop(): Promise<void>;
}

function have(cmd: string): boolean {
  return spawnSync('sh', ['-c', `command -v ${cmd} || test -x /usr/sbin/${cmd}`], { stdio: 'ignore' }).status === 0;
}

function nginxBin(): string {
  return existsSync('/usr/sbin/nginx') ? '/usr/sbin/nginx' : 'nginx';
}

/** Installs Debian packages when running as root; true if they are there afterwards. */
function aptInstall(pkgs: string[], check: () => boolean, allowed: boolean): boolean {
  if (check()) return true;
  if (!allowed || process.getuid?.() !== 0 || !existsSync('/usr/bin/apt-get')) return false;
  process.stderr.write(`installing ${pkgs.join(' ')} from Debian packages...\n`);
  const list = pkgs.join(' ');
  spawnSync('sh', ['-c', `DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${list} >/dev/null 2>&1 || (apt-get update -qq >/dev/null 2>&1 && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq ${list} >/dev/null 2>&1)`]);
  return check();
}

export async function startNginx(name: string, conf: (dir: string, port: number) => string, ready: string): Promise<Target> {
  const dir = mkdtempSync(join(tmpdir(), `kvgate-${name}-`));
  for (const d of ['body', 'proxy', 'fastcgi', 'uwsgi', 'scgi']) mkdirSync(join(dir, d));
  const port = await freePort();
  writeFileSync(join(dir, 'nginx.conf'), conf(dir, port));
  const child = spawn(nginxBin(), ['-c', join(dir, 'nginx.conf'), '-p', dir, '-e', join(dir, 'error.log')], { stdio: 'ignore' });
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url + ready, 10_000);
  return {
    name,
    url,
    pids: [child.pid!],
    stop: async () => {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `logs`: the server writes request lines to stdout, drained through a pipe as kvgate's are. */
export async function forkServer(name: string, script: string, env: Record<string, string>, logs = false): Promise<Target> {
  const child = fork(join(here, script), [], { env: { ...process.env, ...env }, stdio: ['ignore', logs ? 'pipe' : 'ignore', 'inherit', 'ipc'] });
  child.stdout?.resume();
  const port = await new Promise<number>((resolve, reject) => {
    child.once('message', (m: { port: number }) => resolve(m.port));
    child.once('exit', (code) => reject(new Error(`${script} exited with ${code}`)));
  });
  return { name, url: `http://127.0.0.1:${port}`, pids: [child.pid!], stop: () => stopChild(child) };
}

export interface KvgateOptions {
  /** The target's name in the report (default kvgate). */
  name?: string;
  /** Another build's cli.js (default: this checkout's). */
  cli?: string;
  policy?: string;
  /** Flags for node itself (e.g. --cpu-prof). */
  nodeFlags?: string[];
  /** Config fields merged over the benchmark's (e.g. scrape and health intervals). */
  config?: Record<string, unknown>;
  /** Each line kvgate writes to stdout (its request logs, --trace-gc lines); drained if absent. */
  onLine?: (line: string) => void;
}

export async function startKvgate(upstreamUrl: string, opts: KvgateOptions = {}): Promise<Target> {
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-bench-'));
  const port = await freePort();
  const config = {
    listen: { host: '127.0.0.1', port },
    pools: [{ name: 'default', model: 'bench-model', workers: [{ url: upstreamUrl }] }],
    ...(opts.policy ? { policy: { name: opts.policy } } : {}),
    // Stopped by the benchmark, not drained behind a load balancer: exit (and write a profile) at once.
    shutdown: { drainDelayMs: 0 },
    ...opts.config,
  };
  writeFileSync(join(dir, 'kvgate.json'), JSON.stringify(config));
  // Request logs on (the default), written to a pipe the benchmark drains, as a log shipper would.
  const child = spawn(process.execPath, [...(opts.nodeFlags ?? []), opts.cli ?? cliPath, 'serve', '--config', join(dir, 'kvgate.json')], { stdio: ['ignore', 'pipe', 'inherit'] });
  const onLine = opts.onLine;
  if (onLine) {
    let buf = '';
    child.stdout.setEncoding('utf8');
    child.stdout.on('data', (d: string) => {
      buf += d;
      let i: number;
      while ((i = buf.indexOf('\n')) >= 0) {
        onLine(buf.slice(0, i));
        buf = buf.slice(i + 1);
      }
    });
  } else child.stdout.resume();
  const url = `http://127.0.0.1:${port}`;
  await waitReady(url + '/ready', 15_000);
  return {
    name: opts.name ?? 'kvgate',
    url,
    pids: [child.pid!],
    stop: async () => {
      await stopChild(child);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

export function nodeClient<T>(spec: Spec): Promise<T> {
  return new Promise((resolve, reject) => {
    const child = spawn(process.execPath, [join(here, 'client.js'), JSON.stringify(spec)], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => (code === 0 ? resolve(JSON.parse(out) as T) : reject(new Error(`load client exited with ${code}`))));
  });
}

export interface WrkResult {
  requests: number;
  duration_us: number;
  errors: number;
  p50_us: number;
  p90_us: number;
  p99_us: number;
}

export function wrk(url: string, connections: number, seconds: number, delayMs: number, body = BODY): Promise<WrkResult> {
  return new Promise((resolve, reject) => {
    const child = spawn('wrk', ['-t1', `-c${connections}`, `-d${seconds}s`, '-s', join(here, '..', '..', '..', 'benchmarks', 'overhead', 'wrk.lua'), url + '/v1/chat/completions'], {
      env: { ...process.env, BODY: body, DELAY_MS: String(delayMs) },
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.on('exit', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('WRKJSON '));
      if (code !== 0 || !line) return reject(new Error(`wrk exited with ${code}: ${out.slice(-300)}`));
      resolve(JSON.parse(line.slice(8)) as WrkResult);
    });
  });
}


/** Which of the fast tools are here (installing them from Debian's packages where allowed). */
export function setUpTools(install: boolean): { useWrk: boolean; cUpstream: boolean; nginxOk: boolean; notes: string[] } {
  const notes: string[] = [];
  const useWrk = aptInstall(['wrk'], () => have('wrk'), install);
  if (!useWrk) notes.push('wrk not installed: the Node load generator was used, which caps near 25k req/s and flatters every ratio above that');
  const cUpstream = aptInstall(['nginx', 'libnginx-mod-http-echo'], () => have('nginx') && existsSync(ECHO_MODULE), install);
  if (!cUpstream) notes.push('nginx with the echo module not installed: the stand-in worker is the Node one, slower than the proxies it serves');
  const nginxOk = cUpstream || aptInstall(['nginx'], () => have('nginx'), install);
  return { useWrk, cUpstream, nginxOk, notes };
}

/** The stand-in worker: nginx (C) when `native`, else the Node one. */
export async function startStandIn(native: boolean): Promise<Target> {
  return native ? startNginx('direct', upstreamConf, '/metrics') : forkServer('direct', 'upstream.js', {});
}
