/**
 * Feeds the routing policy's prefix index from the workers' KV-cache events: one subscriber per
 * worker listed with `kvEvents` in the config, run as a gateway service. Without events (or while
 * a subscriber is resynchronising) the index stays approximate for that worker, as the policy
 * expects; a subscriber's state is shown per worker in /admin/workers. A worker with
 * `dataParallelSize` N gets one subscriber per rank (fleet/kv-events-ranks.ts), merged into the
 * worker's view.
 *
 * Events are only worth their name if kvgate tokenizes prompts as the engine does (token-parity.ts).
 * Each worker is probed when its subscriber starts and whenever it comes back up: a tokenizer that
 * disagrees is refused for that worker — its events are not used, the index stays approximate for
 * it (reason "token parity: …"), an error is logged with the fix, /admin/workers shows `tokenParity`
 * and kvgate_token_parity{worker,verdict} says so. A refused tokenizer still serves: routing on the
 * approximate index is what kvgate does without events, whereas feeding the index events its
 * prompts never match would only fill it. `tokenizers.strictParity` (serve --strict-parity) fails
 * the start instead, for deployments that want to know before traffic arrives. While serving, the
 * share of sequence-start blocks the events report that kvgate predicted (kv-events-parity.ts) is
 * kvgate_kv_events_parity_ratio{worker}, with a warning when it stays under the threshold.
 */
import { Gauge, type Registry } from 'prom-client';
import { ConfigError, type WorkerKvEvents } from '../../config/index.js';
import { KvEventsParity } from '../../fleet/kv-events-parity.js';
import { KvEventSubscribers, type KvEventSubscriberStatus } from '../../fleet/kv-events.js';
import { RankMergingSink, rankEndpoint, rankSubscriberId } from '../../fleet/kv-events-ranks.js';
import type { WorkerRegistry } from '../../fleet/registry.js';
import type { MetricsScraper } from '../../fleet/scraper.js';
import type { PrefixIndex } from '../../scheduler/index/prefix-index.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../util/clock.js';
import type { PromptTokenizers } from '../pipeline/prompt-tokenizers.js';
import { probeTokenParity, type ParityReport } from './token-parity.js';
import type { GatewayService } from '../types.js';

export interface KvEventsServiceOptions {
  endpoints: readonly WorkerKvEvents[];
  index: PrefixIndex;
  fleet: WorkerRegistry;
  scraper: MetricsScraper;
  clock: Clock;
  logger: Logger;
  /** The gateway's tokenizers: each worker's model's is probed against the worker. Without: no probe. */
  tokenizers?: PromptTokenizers;
  /** Fail start() when a worker's tokenizer disagrees (tokenizers.strictParity). */
  strictParity?: boolean;
  /** Where the parity metrics go. */
  registry?: Registry;
  /** How often workers are checked for coming back up (to probe them again), ms (default 250). */
  upCheckMs?: number;
  /** A worker whose probe could not run ('unknown') is probed again this often while up, ms (default 30,000). */
  retryUnknownMs?: number;
  /** Per request of a probe, ms (default 3,000). */
  probeTimeoutMs?: number;
}

export interface KvEventsService extends GatewayService {
  subscribers: KvEventSubscribers;
  /** Subscribe to a worker's events (a worker added or changed by a config reload; the service runs). */
  addWorker(e: WorkerKvEvents): Promise<void>;
  /** Stop listening to a worker (removed by a config reload). */
  removeWorker(workerId: string): Promise<void>;
  /** The last token-parity probe of each worker. */
  parity: Map<string, ParityReport>;
  /** Probe a worker now (and refuse or accept its events accordingly). */
  probe(workerId: string): Promise<ParityReport | null>;
}

/** Why a low parity ratio is likely, given what the probe found. */
function likelyCause(probe: ParityReport | undefined): string {
  if (probe?.verdict === 'mismatch') return `the tokenizer: ${probe.message}`;
  return (
    "the prompt's rendering or keying differs from the engine's: the chat template (a request's own chat_template, or an hf: tokenizer " +
    "without the model's tokenizer_config.json), the model name (kvgate's pool model against the worker's --served-model-name), " +
    'LoRA adapters (lora_name), a cache_salt, or traffic reaching the worker without going through kvgate'
  );
}

export function kvEventsService(o: KvEventsServiceOptions): KvEventsService {
  const subscribers = new KvEventSubscribers();
  const endpoints = new Map<string, WorkerKvEvents>();
  const parity = new Map<string, ParityReport>();
  // Parity while serving needs predictions to compare with: a policy whose index keeps none has no ratio.
  const watch =
    o.index.predictedTtlMs > 0
      ? new KvEventsParity(o.index, {
          onChange: (id, low, ratio, blocks) => {
            if (low)
              o.logger.warn(
                { worker: id, ratio: Number(ratio.toFixed(3)), blocks },
                `kv events: only ${(ratio * 100).toFixed(0)}% of the blocks worker ${id} reports at the start of a prompt are blocks kvgate predicted for it; likely cause: ${likelyCause(parity.get(id))}`,
              );
            else o.logger.info({ worker: id, ratio: Number(ratio.toFixed(3)) }, 'kv events: parity with kvgate recovered');
          },
        })
      : null;
  o.fleet.addDescriber((w) => {
    const p = parity.get(w.id);
    const out: Record<string, unknown> = {};
    if (p) out['tokenParity'] = { verdict: p.verdict, tokenizer: p.tokenizer, message: p.message, at: p.at, samples: p.samples };
    if (watch && endpoints.has(w.id)) {
      const t = watch.totals(w.id);
      out['kvEventsParity'] = { ratio: watch.ratio(w.id), low: watch.isLow(w.id), threshold: watch.threshold, blocks: t?.blocks ?? 0, matched: t?.matched ?? 0 };
    }
    return out;
  });
  if (o.registry) registerParityMetrics(o.registry, parity, watch);
  /** Subscriber ids per worker: the worker's own, or one per data-parallel rank. */
  const subscriberIds = new Map<string, string[]>();
  o.fleet.addDescriber((w) => describeSubscribers(w.id, subscriberIds.get(w.id) ?? [w.id], subscribers, o.index));
  /** Stop every subscriber of a worker (its ranks'). */
  const unsubscribe = async (workerId: string): Promise<void> => {
    const ids = subscriberIds.get(workerId) ?? [workerId];
    subscriberIds.delete(workerId);
    await Promise.all(ids.map((id) => subscribers.remove(id)));
  };
  const subscribe = (e: WorkerKvEvents): void => {
    endpoints.set(e.workerId, e);
    const w = o.fleet.get(e.workerId);
    if (!w) return;
    if (!o.index.hasWorker(w.id)) o.index.addWorker(w.id, w.numGpuBlocks);
    if (parity.get(w.id)?.verdict === 'mismatch') {
      o.index.setSource(w.id, 'approximate', `token parity: ${parity.get(w.id)!.message}`, o.clock.now());
      return;
    }
    if (subscriberIds.has(w.id)) return;
    const ranks = e.dataParallelSize ?? 1;
    const watched = watch ? watch.sink(o.index) : o.index;
    const sink = ranks > 1 ? new RankMergingSink(watched, w.id, ranks) : watched;
    const ids: string[] = [];
    for (let r = 0; r < ranks; r++) {
      const id = ranks > 1 ? rankSubscriberId(w.id, r) : w.id;
      ids.push(id);
      subscribers.add({
        workerId: id,
        endpoint: rankEndpoint(e.endpoint, r),
        ...(e.replayEndpoint !== undefined ? { replayEndpoint: rankEndpoint(e.replayEndpoint, r) } : {}),
        ...(e.topic !== undefined ? { topic: e.topic } : {}),
        index: sink,
        blockSize: w.blockSize,
        clock: o.clock,
        // Silence only means trouble while the worker has work.
        isBusy: () => w.inflightCount > 0 || (w.snapshot?.running ?? 0) > 0,
        onStatus: (s) =>
          o.logger[s.source === 'events' ? 'info' : 'warn']({ worker: s.workerId, source: s.source, reason: s.reason }, 'kv events'),
      });
    }
    subscriberIds.set(w.id, ids);
  };
  /**
   * Probe worker `id` and act on the verdict: a mismatch stops its subscriber and leaves the index
   * approximate for it; a match (after a mismatch) subscribes it again.
   */
  const probe = async (id: string): Promise<ParityReport | null> => {
    const w = o.fleet.get(id);
    if (!w || !o.tokenizers || !endpoints.has(id)) return null;
    const report = await probeTokenParity({
      workerId: w.id,
      workerUrl: w.url,
      model: w.model,
      pool: w.pool,
      tokenizer: o.tokenizers.for(w.model),
      headers: { ...w.upstreamHeaders },
      timeoutMs: o.probeTimeoutMs ?? 3_000,
    });
    if (!endpoints.has(id)) return report; // removed while it was probed
    const before = parity.get(id)?.verdict;
    parity.set(id, report);
    if (report.verdict === 'mismatch') {
      if (before !== 'mismatch') o.logger.error({ worker: id, tokenizer: report.tokenizer, samples: report.samples }, `kv events refused: ${report.message}`);
      if (subscriberIds.has(id)) await unsubscribe(id);
      o.index.clearWorker(id, ['event']);
      o.index.setSource(id, 'approximate', `token parity: ${report.message}`, o.clock.now());
    } else {
      if (report.verdict === 'match' && before !== 'match') o.logger.info({ worker: id, tokenizer: report.tokenizer }, 'token parity: kvgate tokenizes as the worker does');
      if (report.verdict === 'unknown') o.logger.warn({ worker: id }, report.message);
      if (before === 'mismatch' && report.verdict === 'match') subscribe(endpoints.get(id)!);
    }
    return report;
  };
  // Workers coming back up (a restart may bring another model or tokenizer) are probed again, and
  // so, now and then, is a worker up whose last probe could not run. Reading a flag per worker.
  const wasUp = new Map<string, boolean>();
  const probing = new Set<string>();
  let upTimer: NodeJS.Timeout | null = null;
  const checkUp = (): void => {
    const now = Date.now();
    for (const id of endpoints.keys()) {
      const w = o.fleet.get(id);
      if (!w) continue;
      const up = w.healthy;
      const prev = wasUp.get(id);
      wasUp.set(id, up);
      const last = parity.get(id);
      const retry = last?.verdict === 'unknown' && now - last.at >= (o.retryUnknownMs ?? 30_000);
      if (up && (prev === false || retry)) void probeOnce(id);
    }
  };
  /** probe(), unless one of this worker is under way. */
  const probeOnce = async (id: string): Promise<ParityReport | null> => {
    if (probing.has(id)) return null;
    probing.add(id);
    try {
      return await probe(id);
    } finally {
      probing.delete(id);
    }
  };
  return {
    name: 'kv-events',
    subscribers,
    parity,
    probe,
    async start() {
      // Learn each worker's block size and capacity first: events are hashed at that block size
      // (the start's own first scrape, not a second round; a worker that has not answered within
      // its bounded wait gets its size when it does).
      await o.scraper.firstScrape();
      for (const e of o.endpoints) subscribe(e);
      if (o.tokenizers) {
        const probes = Promise.all(o.endpoints.map((e) => probeOnce(e.workerId)));
        if (o.strictParity) {
          const refused = (await probes).filter((r) => r?.verdict === 'mismatch');
          if (refused.length > 0) throw new ConfigError(refused.map((r) => `tokenizers (strictParity): ${r!.message}`));
        } else void probes;
        for (const e of o.endpoints) wasUp.set(e.workerId, o.fleet.get(e.workerId)?.healthy ?? false);
        upTimer = setInterval(checkUp, o.upCheckMs ?? 250);
        upTimer.unref();
      }
    },
    async addWorker(e) {
      const w = o.fleet.get(e.workerId);
      if (w) await o.scraper.scrape(w);
      parity.delete(e.workerId);
      // A changed worker may have changed its number of ranks: its old subscribers go first.
      if (subscriberIds.has(e.workerId)) await unsubscribe(e.workerId);
      subscribe(e);
      void probeOnce(e.workerId);
    },
    removeWorker: async (id) => {
      endpoints.delete(id);
      parity.delete(id);
      wasUp.delete(id);
      watch?.forget(id);
      await unsubscribe(id);
    },
    close: async () => {
      if (upTimer) clearInterval(upTimer);
      await subscribers.closeAll();
    },
  };
}

/** kvgate_token_parity and, where parity is watched, kvgate_kv_events_parity_ratio. */
function registerParityMetrics(registry: Registry, parity: ReadonlyMap<string, ParityReport>, watch: KvEventsParity | null): void {
  const verdicts = ['match', 'mismatch', 'unknown'] as const;
  new Gauge({
    name: 'kvgate_token_parity',
    help: "1 for the verdict of each KV-event worker's token-parity probe (match, mismatch: its events are not used, unknown: not asked yet), 0 for the others",
    labelNames: ['worker', 'verdict'],
    registers: [registry],
    collect() {
      this.reset();
      for (const [id, p] of parity) for (const v of verdicts) this.set({ worker: id, verdict: v }, p.verdict === v ? 1 : 0);
    },
  });
  if (watch)
    new Gauge({
      name: 'kvgate_kv_events_parity_ratio',
      help: "Share of the blocks a worker's KV events report at the start of a prompt that kvgate predicted for it (near 1: kvgate tokenizes as the engine does)",
      labelNames: ['worker'],
      registers: [registry],
      collect() {
        this.reset();
        for (const id of watch.ids()) {
          const r = watch.ratio(id);
          if (r !== null) this.set({ worker: id }, r);
        }
      },
    });
}

/** What /admin/workers shows of a worker's KV-event subscribers: one, or one per data-parallel rank. */
function describeSubscribers(workerId: string, ids: readonly string[], subscribers: KvEventSubscribers, index: PrefixIndex): Record<string, unknown> {
  const view = (s: KvEventSubscriberStatus) => ({
    endpoint: s.endpoint,
    source: s.source,
    reason: s.reason,
    lastSeq: s.lastSeq,
    batches: s.batches,
    gaps: s.gaps,
    replays: s.replays,
    resyncs: s.resyncs,
    restarts: s.restarts,
    errors: s.errors,
    // Events deliberately not indexed: other KV-cache groups of a hybrid model, other media.
    skippedOtherGroup: s.mapper.otherGroup,
    skippedOtherMedium: s.mapper.otherMedium,
  });
  const all = ids.map((id) => subscribers.get(id)?.status()).filter((s): s is KvEventSubscriberStatus => s !== undefined);
  if (all.length === 0) return {};
  if (ids.length === 1) return { kvEvents: view(all[0]!) };
  const st = index.workerStatus(workerId);
  const sum = (k: 'batches' | 'gaps' | 'replays' | 'resyncs' | 'restarts' | 'errors') => all.reduce((n, s) => n + s[k], 0);
  return {
    kvEvents: {
      source: st?.source ?? 'approximate',
      reason: st?.reason ?? '',
      batches: sum('batches'),
      gaps: sum('gaps'),
      replays: sum('replays'),
      resyncs: sum('resyncs'),
      restarts: sum('restarts'),
      errors: sum('errors'),
      ranks: all.map(view),
    },
  };
}
