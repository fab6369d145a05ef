/** A draft pool and a target pool of simulated workers behind a gateway with a cascade. */
import { connect, createServer as createNetServer, type AddressInfo, type Socket } from 'node:net';
import { parseConfig, type RawConfig } from '../../src/config/index.js';
import { createGateway, type Gateway } from '../../src/gateway/gateway.js';
import { startSimWorker, type SimWorker } from '../../src/sim/worker/server.js';
import type { SpeculativeInstall, SpeculativeOptions } from '../../src/speculative/install.js';
import { createLogger } from '../../src/telemetry/logger.js';

export const TARGET = 'llama-3.1-70b';
export const DRAFT = 'llama-3.1-8b';

export async function startTarget(speed = 200): Promise<SimWorker> {
  return startSimWorker({ model: TARGET, tp: 4, speed });
}

export async function startDraft(opts: { fidelity?: number; acceptance?: number; speed?: number } = {}): Promise<SimWorker> {
  return startSimWorker({
    model: DRAFT,
    gpu: 'a10g',
    speed: opts.speed ?? 200,
    draftOf: TARGET,
    ...(opts.acceptance !== undefined ? { draftAcceptance: opts.acceptance } : { draftFidelity: opts.fidelity ?? 0.75 }),
  });
}

export function cascadeConfig(targetUrls: string[], draftUrls: string[], extra: Partial<RawConfig> = {}, k = 4) {
  return parseConfig({
    listen: { host: '127.0.0.1', port: 0 },
    pools: [
      { name: 'target', model: TARGET, workers: targetUrls.map((url, i) => ({ url, id: `t${i}` })) },
      { name: 'draft', model: DRAFT, workers: draftUrls.map((url, i) => ({ url, id: `d${i}` })) },
    ],
    scrape: { intervalMs: 200 },
    // Lenient probes: these tests load the machine's two cores with simulated workers, and a
    // healthy worker marked down would turn a correctness test into a 503.
    health: { intervalMs: 1000, timeoutMs: 800, failuresToMarkDown: 5 },
    log: { level: 'silent' },
    speculative: { cascades: [{ model: TARGET, targetPool: 'target', draftPool: 'draft', k }] },
    ...extra,
  });
}

export async function startCascade(
  targetUrls: string[],
  draftUrls: string[],
  opts: { extra?: Partial<RawConfig>; k?: number; spec?: SpeculativeOptions } = {},
): Promise<{ gw: Gateway; url: string; spec: SpeculativeInstall }> {
  const gw = createGateway(cascadeConfig(targetUrls, draftUrls, opts.extra, opts.k), { logger: createLogger({ level: 'silent' }), speculative: opts.spec });
  const { url } = await gw.start();
  return { gw, url, spec: gw.speculative! };
}

/** Upper critical value of chi-squared with df degrees of freedom at significance 0.001 (Wilson–Hilferty). */
export function chiSquaredCritical001(df: number): number {
  const z = 3.0902; // one-sided 0.999 normal quantile
  const a = 2 / (9 * df);
  return df * Math.pow(1 - a + z * Math.sqrt(a), 3);
}

/** Pearson's statistic of observed counts against expected probabilities; cells expecting < 5 are pooled. */
export function chiSquared(counts: Map<number, number>, probs: Map<number, number>, n: number): { stat: number; df: number } {
  let stat = 0;
  let cells = 0;
  let pooledObs = 0;
  let pooledExp = 0;
  const seen = new Set<number>();
  for (const [t, p] of probs) {
    seen.add(t);
    const e = p * n;
    const o = counts.get(t) ?? 0;
    if (e < 5) {
      pooledObs += o;
      pooledExp += e;
      continue;
    }
    stat += ((o - e) * (o - e)) / e;
    cells++;
  }
  for (const [t, o] of counts) if (!seen.has(t)) pooledObs += o; // outside the support: surely wrong
  if (pooledExp > 0 || pooledObs > 0) {
    const e = Math.max(pooledExp, 1e-9);
    stat += ((pooledObs - e) * (pooledObs - e)) / e;
    cells++;
  }
  return { stat, df: Math.max(1, cells - 1) };
}

/**
 * A TCP proxy in front of a worker that can be frozen, as SIGSTOP freezes a process: while
 * frozen, connections are still accepted (by the kernel, for a stopped process) and bytes are
 * taken in, but nothing is passed on in either direction; thawing passes on what was held.
 */
export interface FreezableProxy {
  url: string;
  freeze(): void;
  /** Freeze when the n-th request from now for `path` arrives (it is held, unanswered). */
  freezeAt(n: number, path: string): void;
  thaw(): void;
  close(): Promise<void>;
}

export async function freezableProxy(target: string): Promise<FreezableProxy> {
  const { port: targetPort, hostname } = new URL(target);
  let frozen = false;
  const held: Array<() => void> = [];
  const sockets = new Set<Socket>();
  let trigger: { left: number; line: string } | null = null;
  const pass = (from: Socket, to: Socket, fromClient: boolean) => {
    from.on('data', (chunk: Buffer) => {
      if (fromClient && trigger && chunk.includes(trigger.line) && --trigger.left === 0) {
        trigger = null;
        frozen = true;
      }
      if (frozen) held.push(() => to.write(chunk));
      else to.write(chunk);
    });
    from.on('close', () => (frozen ? held.push(() => to.destroy()) : to.destroy()));
    from.on('error', () => undefined);
  };
  const server = createNetServer((client) => {
    const upstream = connect(Number(targetPort), hostname);
    sockets.add(client);
    sockets.add(upstream);
    client.on('close', () => sockets.delete(client));
    upstream.on('close', () => sockets.delete(upstream));
    pass(client, upstream, true);
    pass(upstream, client, false);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const { port } = server.address() as AddressInfo;
  return {
    url: `http://127.0.0.1:${port}`,
    freeze: () => void (frozen = true),
    freezeAt: (n, path) => void (trigger = { left: n, line: `POST ${path} ` }),
    thaw: () => {
      frozen = false;
      for (const f of held.splice(0)) f();
    },
    close: async () => {
      for (const s of sockets) s.destroy();
      await new Promise<void>((r) => server.close(() => r()));
    },
  };
}
