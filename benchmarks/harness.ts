/**
 * What the live benchmarks (bench cache, bench overhead) share: free ports, waiting for a server,
 * stopping children, quantiles, a process's CPU time, and pinning processes to cores.
 *
 * Pinning: on a machine with few cores, a load generator scheduled on the gateway's core steals
 * it on every wake-up (each response written wakes the client, which then runs before the
 * gateway's next request), so the gateway's own latency includes the client's work. With two or
 * more cores and `taskset` available, the process under test gets the last core to itself and
 * everything else (load generator, upstream, Redis) the others.
 */
import { spawn, spawnSync, type ChildProcess, type SpawnOptions } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { availableParallelism } from 'node:os';

export function quantile(xs: readonly number[], q: number): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  return s[Math.min(s.length - 1, Math.max(0, Math.ceil(q * s.length) - 1))]!;
}

export function median(xs: readonly number[]): number {
  if (xs.length === 0) return NaN;
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m]! : (s[m - 1]! + s[m]!) / 2;
}

export async function freePort(): Promise<number> {
  return new Promise((resolve, reject) => {
    const srv = createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const a = srv.address();
      srv.close(() => resolve(typeof a === 'object' && a ? a.port : 0));
    });
  });
}

/** Resolves once `url` answers 200; throws after `timeoutMs` with the last failure. */
export async function waitReady(url: string, timeoutMs: number): Promise<void> {
  const end = Date.now() + timeoutMs;
  let last = '';
  while (Date.now() < end) {
    try {
      const r = await fetch(url);
      await r.arrayBuffer();
      if (r.status === 200) return;
      last = `status ${r.status}`;
    } catch (e) {
      last = (e as Error).message;
    }
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`${url} not ready after ${timeoutMs} ms (${last})`);
}

export function stopChild(child: ChildProcess): Promise<void> {
  return new Promise((resolve) => {
    if (child.exitCode !== null || child.signalCode !== null) return resolve();
    child.once('exit', () => resolve());
    child.kill('SIGTERM');
    setTimeout(() => child.kill('SIGKILL'), 3000).unref();
  });
}

const CLK_TCK = Number(spawnSync('getconf', ['CLK_TCK'], { encoding: 'utf8' }).stdout?.trim()) || 100;

/** CPU time (user + system) a process has used so far, ms; null where /proc is not available. */
export function processCpuMs(pid: number | undefined): number | null {
  if (pid === undefined) return null;
  try {
    const f = readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]!.split(' ');
    return ((Number(f[11]) + Number(f[12])) * 1000) / CLK_TCK;
  } catch {
    return null;
  }
}

/** Child processes of `pid` (e.g. nginx's workers under its master), from /proc. */
function childrenOf(pid: number): number[] {
  const out: number[] = [];
  try {
    for (const task of readdirSync(`/proc/${pid}/task`)) {
      const list = readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
      if (list) for (const c of list.split(' ')) out.push(Number(c));
    }
  } catch {
    // gone, or no /proc
  }
  return out;
}

/** CPU time of a process and all its descendants, ms; null where /proc is not available. */
export function treeCpuMs(pid: number | undefined): number | null {
  const own = processCpuMs(pid);
  if (own === null || pid === undefined) return own;
  return childrenOf(pid).reduce((s, c) => s + (treeCpuMs(c) ?? 0), own);
}

export type Role = 'under-test' | 'load';

/** Where processes go: the process under test on the last core, the rest on the others. */
export class CorePlan {
  readonly enabled: boolean;
  /** Cores of the machine (counted before anything is pinned). */
  readonly cores = availableParallelism();

  constructor(wanted: boolean) {
    this.enabled = wanted && this.cores >= 2 && spawnSync('taskset', ['-c', '0', 'true']).status === 0;
  }

  /** The cpu list for `role`, as taskset takes it. */
  cpus(role: Role): string {
    return role === 'under-test' ? String(this.cores - 1) : this.cores === 2 ? '0' : `0-${this.cores - 2}`;
  }

  /** spawn(), under taskset when pinning is on. */
  spawn(role: Role, cmd: string, args: readonly string[], opts: SpawnOptions): ChildProcess {
    return this.enabled ? spawn('taskset', ['-c', this.cpus(role), cmd, ...args], opts) : spawn(cmd, args, opts);
  }

  /** Pin an already running process (e.g. a forked child) and its threads. */
  pin(role: Role, pid: number | undefined): void {
    if (this.enabled && pid !== undefined) spawnSync('taskset', ['-a', '-p', '-c', this.cpus(role), String(pid)], { stdio: 'ignore' });
  }

  /**
   * Give the process's main thread (its event loop) the under-test core alone and move its other
   * threads (V8's platform workers, libuv's pool) to the load cores. Threads created later start on
   * the main thread's core, so call this again once the process is warm. With every thread of a
   * Node process pinned to one core, its GC and compiler helpers preempt the event loop in
   * scheduler slices of milliseconds, which shows up as a tail a Node process with two cores of its
   * own never sees (measured in the cache benchmark's gateway: its Redis GETs took 2.7–3.5 ms at
   * the p99 with the whole process on one core, 0.72 ms with the event loop alone on it).
   */
  isolateEventLoop(pid: number | undefined): void {
    if (!this.enabled || pid === undefined) return;
    let tasks: string[];
    try {
      tasks = readdirSync(`/proc/${pid}/task`);
    } catch {
      return;
    }
    for (const tid of tasks) {
      spawnSync('taskset', ['-p', '-c', this.cpus(tid === String(pid) ? 'under-test' : 'load'), tid], { stdio: 'ignore' });
    }
  }

  describe(eventLoopAlone = false): string {
    if (!this.enabled) return 'processes not pinned';
    return eventLoopAlone
      ? `gateway's event-loop thread alone on cpu ${this.cpus('under-test')}; its helper threads, the load generator and upstream on cpu ${this.cpus('load')}`
      : `gateway pinned to cpu ${this.cpus('under-test')}, load generator and upstream to cpu ${this.cpus('load')}`;
  }
}
