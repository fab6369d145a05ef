/**
 * What fault scenarios are built from: simulated workers as child processes (so they can be
 * killed, stopped with SIGSTOP and restarted on the same port), a gateway in this process, a
 * closed-loop load generator that classifies every request, and a tally.
 *
 * Every request a scenario sends ends as exactly one of:
 * - ok: a 2xx whose body is complete (a stream ends with `data: [DONE]`);
 * - error: a documented error — a status with an OpenAI-shaped error body, or a stream that ends
 *   with an SSE error event (docs/api.md#failures);
 * - unanswered: no response within the client's timeout, a connection reset before any answer,
 *   or an answer that is neither of the above (a cut stream without an error event, a body that
 *   is not the documented shape). A scenario passes only with 0 of these.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseConfig, type RawConfig } from '../../src/config/index.js';
import { sampleValue } from '../../src/fleet/prom-text.js';
import { createGateway, type Gateway } from '../../src/gateway/gateway.js';
import { createLogger, type Logger } from '../../src/telemetry/logger.js';
import { freePort, startRedis, type RedisServer } from '../../test/redis-server.js';


const here = dirname(fileURLToPath(import.meta.url));
export const CLI = join(here, '..', '..', 'src', 'cli.js');
export const MODEL = 'llama-3.1-8b';

/** One scenario of the fault matrix: one file under benchmarks/faults/, one line in its index. */
export interface FaultScenario {
  name: string;
  /** One line: what goes wrong. */
  description: string;
  run(): Promise<ScenarioResult>;
}

export interface ScenarioResult {
  tally: Tally;
  /** Named figures the scenario measured (shown in the report). */
  figures: Record<string, number | string | boolean>;
  /** Targets the scenario checks beyond unanswered = 0: name → met. */
  checks: Record<string, boolean>;
}

export class Tally {
  sent = 0;
  ok = 0;
  errors = 0;
  unanswered = 0;
  /** Count of each documented error, by status and code. */
  readonly byError = new Map<string, number>();
  /** Why requests were unanswered (first few). */
  readonly why: string[] = [];

  add(o: Outcome): void {
    this.sent++;
    if (o.kind === 'ok') this.ok++;
    else if (o.kind === 'error') {
      this.errors++;
      this.byError.set(o.detail, (this.byError.get(o.detail) ?? 0) + 1);
    } else {
      this.unanswered++;
      if (this.why.length < 5) this.why.push(o.detail);
    }
  }

  merge(t: Tally): void {
    this.sent += t.sent;
    this.ok += t.ok;
    this.errors += t.errors;
    this.unanswered += t.unanswered;
    for (const [k, v] of t.byError) this.byError.set(k, (this.byError.get(k) ?? 0) + v);
    this.why.push(...t.why.slice(0, 5 - Math.min(5, this.why.length)));
  }
}

export type Outcome = { kind: 'ok' | 'error' | 'unanswered'; detail: string; status: number; ms: number; end: number; text: string };

// ---- workers as processes ----

export interface SimProcess {
  url: string;
  port: number;
  proc: ChildProcess;
  /** Send a signal (SIGKILL, SIGSTOP, SIGCONT). */
  signal(sig: NodeJS.Signals): void;
  /** Start again on the same port (after a kill). */
  restart(): Promise<void>;
  stop(): Promise<void>;
}

/** `kvgate sim` in a child process on `port` (0: a free one); resolves once it listens. */
export async function spawnSim(args: string[] = [], port = 0): Promise<SimProcess> {
  const start = async (p: number): Promise<{ proc: ChildProcess; url: string }> => {
    const proc = spawn(process.execPath, [CLI, 'sim', '--port', String(p), '--model', MODEL, ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    const url = await new Promise<string>((resolve, reject) => {
      const t = setTimeout(() => reject(new Error(`sim did not start: ${out}`)), 15_000);
      proc.stdout.on('data', (d: Buffer) => {
        out += d.toString();
        const m = /worker: (http:\/\/\S+)/.exec(out);
        if (m) {
          clearTimeout(t);
          resolve(m[1]!);
        }
      });
      proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
      proc.once('exit', (code) => {
        clearTimeout(t);
        reject(new Error(`sim exited (${code}): ${out}`));
      });
    });
    proc.stdout.resume();
    return { proc, url };
  };
  const first = await start(port);
  const s: SimProcess = {
    url: first.url,
    port: Number(new URL(first.url).port),
    proc: first.proc,
    signal: (sig) => void s.proc.kill(sig),
    async restart() {
      // The port may linger briefly after a kill; retry for a moment.
      for (let i = 0; ; i++) {
        try {
          s.proc = (await start(s.port)).proc;
          return;
        } catch (e) {
          if (i >= 20) throw e;
          await sleep(100);
        }
      }
    },
    async stop() {
      if (s.proc.exitCode !== null || s.proc.signalCode !== null) return;
      s.proc.kill('SIGCONT');
      s.proc.kill('SIGKILL');
      await once(s.proc, 'exit').catch(() => undefined);
    },
  };
  return s;
}

export async function spawnSims(n: number, args: string[] = []): Promise<SimProcess[]> {
  return Promise.all(Array.from({ length: n }, () => spawnSim(args)));
}

// ---- the gateway ----

/** A gateway in this process in front of `urls` (worker ids w0, w1, ...); `extra` overrides. */
/**
 * The scrape token the harness's gateways accept on /metrics once a scenario configures tenant
 * keys (then /metrics is closed to anyone without an admin or metrics key); fetchMetrics sends it.
 */
const METRICS_KEY = 'sk-faults-metrics-0001';

/** `admin.metricsKeys` with METRICS_KEY where a scenario configures tenants and no admin section of its own. */
function withMetricsKey(extra: Partial<RawConfig>): Partial<RawConfig> {
  return extra.tenants && !extra.admin ? { ...extra, admin: { metricsKeys: [{ value: METRICS_KEY }] } } : extra;
}

/** A gateway's (or a worker's) /metrics text, read with the harness's scrape token. */
export async function fetchMetrics(base: string): Promise<string> {
  return (await fetch(base + '/metrics', { headers: { authorization: `Bearer ${METRICS_KEY}` } })).text();
}

export async function startGateway(urls: string[], extra: Partial<RawConfig> = {}, logger?: Logger): Promise<{ gw: Gateway; url: string }> {
  extra = withMetricsKey(extra);
  const config = parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    pools: urls.length > 0 ? [{ name: 'main', model: MODEL, workers: urls.map((url, i) => ({ url, id: `w${i}` })) }] : [],
    scrape: { intervalMs: 500 },
    health: { intervalMs: 1_000 },
    log: { level: 'silent' },
    shutdown: { drainDelayMs: 0, graceMs: 2_000 },
    ...extra,
  });
  const gw = createGateway(config, { logger: logger ?? createLogger({ level: 'silent' }) });
  const { url } = await gw.start();
  return { gw, url };
}

// ---- requests ----

export interface Ask {
  path?: string;
  body?: unknown;
  headers?: Record<string, string>;
  /** Raw body instead of JSON.stringify(body). */
  raw?: string;
  timeoutMs?: number;
}

/** Send one request and classify its outcome (never throws). */
export async function ask(base: string, a: Ask): Promise<Outcome> {
  const t0 = performance.now();
  const signal = AbortSignal.timeout(a.timeoutMs ?? 30_000);
  const done = (kind: Outcome['kind'], detail: string, status: number, text = ''): Outcome => ({
    kind,
    detail,
    status,
    ms: performance.now() - t0,
    end: performance.now(),
    text,
  });
  let status = 0;
  try {
    const r = await fetch(base + (a.path ?? '/v1/chat/completions'), {
      method: 'POST',
      headers: { 'content-type': 'application/json', ...a.headers },
      body: a.raw ?? JSON.stringify(a.body),
      signal,
    });
    status = r.status;
    const text = await r.text();
    return classify(status, r.headers.get('content-type') ?? '', text, done);
  } catch (e) {
    const err = e as Error;
    return done('unanswered', signal.aborted ? 'client timeout' : `${status ? `after ${status}: ` : ''}${err.message}${err.cause ? ` (${(err.cause as Error).message})` : ''}`, status);
  }
}

function classify(status: number, ct: string, text: string, done: (k: Outcome['kind'], d: string, s: number, t?: string) => Outcome): Outcome {
  if (ct.startsWith('text/event-stream')) {
    if (text.includes('data: [DONE]')) return done('ok', 'ok', status, text);
    const last = text.trimEnd().split('\n\n').at(-1) ?? '';
    try {
      const ev = JSON.parse(last.slice('data: '.length)) as { error?: { code?: string } };
      if (ev.error) return done('error', `stream ${ev.error.code ?? '?'}`, status, text);
    } catch {
      // fall through
    }
    return done('unanswered', 'stream cut without [DONE] or an error event', status, text);
  }
  let j: { error?: { message?: unknown; type?: unknown; code?: unknown }; choices?: unknown } | null = null;
  try {
    j = JSON.parse(text);
  } catch {
    return done('unanswered', `${status} with a body that is not JSON`, status, text);
  }
  // A completion has choices; an embeddings answer is a list of vectors.
  const answered = j?.choices !== undefined || (j as { object?: unknown; data?: unknown } | null)?.object === 'list';
  if (status >= 200 && status < 300 && answered) return done('ok', 'ok', status, text);
  if (status >= 400 && j?.error && typeof j.error.message === 'string' && typeof j.error.type === 'string') {
    return done('error', `${status} ${String(j.error.code)}`, status, text);
  }
  return done('unanswered', `${status} not in OpenAI's shape`, status, text);
}

export interface LoadOptions {
  base: string;
  clients: number;
  durationMs: number;
  /** Stop early once this holds (checked before each request). */
  stop?: () => boolean;
  /** The request client i sends as its n-th. */
  next: (client: number, n: number) => Ask;
  onOutcome?: (o: Outcome, client: number) => void;
}

/** Closed loop: each client sends its next request when the previous one ended. */
export async function closedLoop(o: LoadOptions): Promise<{ tally: Tally; outcomes: Outcome[] }> {
  const tally = new Tally();
  const outcomes: Outcome[] = [];
  const end = performance.now() + o.durationMs;
  await Promise.all(
    Array.from({ length: o.clients }, async (_, c) => {
      for (let n = 0; performance.now() < end && !o.stop?.(); n++) {
        const out = await ask(o.base, o.next(c, n));
        tally.add(out);
        outcomes.push(out);
        o.onOutcome?.(out, c);
      }
    }),
  );
  return { tally, outcomes };
}

/** A short streamed chat request (distinct prompts per client so routing spreads). */
export function streamChat(client: number, n: number, maxTokens = 24): Ask {
  return {
    body: {
      model: MODEL,
      stream: true,
      max_tokens: maxTokens,
      messages: [{ role: 'user', content: `client ${client} question ${n}: tell me about rivers` }],
    },
  };
}

/** Completions per one-second window from `from` (performance.now() ms) to `to`. */
export function perSecond(outcomes: Outcome[], from: number, to: number): number[] {
  const n = Math.max(0, Math.floor((to - from) / 1000));
  const bins = new Array<number>(n).fill(0);
  for (const o of outcomes) {
    if (o.kind !== 'ok') continue;
    const i = Math.floor((o.end - from) / 1000);
    if (i >= 0 && i < n) bins[i]!++;
  }
  return bins;
}

export function sleep(ms: number): Promise<void> {
  return new Promise((r) => setTimeout(r, ms));
}

export function quantile(xs: number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.floor(q * s.length))]!;
}

/** The value of the first sample `name` with (at least) `labels` in a /metrics text, or undefined. */
export const metric = sampleValue;

// ---- Redis and gateway processes ----

/**
 * A real redis-server on a free loopback port (test/redis-server.ts), or why there is none: a
 * scenario that needs Redis then reports itself skipped (skipped() below).
 */
export async function redisForScenario(): Promise<RedisServer | string> {
  const r = spawnSync('redis-server', ['--version'], { encoding: 'utf8' });
  if (r.status !== 0) return 'redis-server is not installed (Debian: apt-get install redis-server)';
  return startRedis();
}

/** The result of a scenario that could not run here, and why. */
export function skipped(why: string): ScenarioResult {
  return { tally: new Tally(), figures: { skipped: why }, checks: {} };
}


export interface GatewayProcess {
  url: string;
  proc: ChildProcess;
  /** SIGKILL: the replica dies at once, its sockets and Redis connection with it. */
  kill(): Promise<void>;
}

/**
 * `kvgate serve` in a child process (a replica that can be killed), with `config` written to a
 * temporary file (workers given by URL, as in startGateway); resolves once /health answers.
 * `node`: flags for node itself; `cli`: another build's cli.js (default this checkout's).
 */
export async function spawnGateway(urls: string[], extra: Partial<RawConfig> = {}, node: { flags?: string[]; cli?: string } = {}): Promise<GatewayProcess> {
  extra = withMetricsKey(extra);
  const port = await freePort();
  const dir = mkdtempSync(join(tmpdir(), 'kvgate-faults-'));
  const file = join(dir, 'kvgate.yaml');
  const config = {
    listen: { host: '127.0.0.1', port },
    pools: [{ name: 'main', model: MODEL, workers: urls.map((url, i) => ({ url, id: `w${i}` })) }],
    scrape: { intervalMs: 500 },
    health: { intervalMs: 1_000 },
    log: { level: 'silent' },
    shutdown: { drainDelayMs: 0, graceMs: 2_000 },
    ...extra,
  };
  // JSON is YAML.
  writeFileSync(file, JSON.stringify(config));
  const proc = spawn(process.execPath, [...(node.flags ?? []), node.cli ?? CLI, 'serve', '--config', file], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  proc.stdout.on('data', (d: Buffer) => (out += d.toString()));
  proc.stderr.on('data', (d: Buffer) => (out += d.toString()));
  const url = `http://127.0.0.1:${port}`;
  const end = Date.now() + 15_000;
  for (;;) {
    if (proc.exitCode !== null) throw new Error(`kvgate serve exited (${proc.exitCode}): ${out}`);
    const ok = await fetch(url + '/health').then((r) => r.ok, () => false);
    if (ok) break;
    if (Date.now() > end) {
      proc.kill('SIGKILL');
      throw new Error(`kvgate serve did not answer /health: ${out}`);
    }
    await sleep(100);
  }
  return {
    url,
    proc,
    async kill() {
      if (proc.exitCode === null && proc.signalCode === null) {
        proc.kill('SIGKILL');
        await once(proc, 'exit').catch(() => undefined);
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
