/**
 * The fleet side of the composition root: the worker registry with its circuit breakers and the
 * gateway's metrics over it, and the router with the configured policy.
 */
import { ConfigError, type GatewayConfig } from '../../config/index.js';
import type { BreakerState, TransitionCause } from '../../fleet/circuit-breaker.js';
import { WorkerRegistry } from '../../fleet/registry.js';
import type { WorkerState } from '../../fleet/worker-state.js';
import { createPolicy } from '../../scheduler/registry.js';
import { Router } from '../../scheduler/router.js';
import type { Policy } from '../../scheduler/types.js';
import { droppedLogBytes, type Logger } from '../../telemetry/logger.js';
import { GatewayMetrics } from '../../telemetry/metrics.js';
import type { Clock } from '../../util/clock.js';
import type { Rng } from '../../util/rng.js';
import { DEFAULT_PREFILL_TOKENS_PER_SEC } from '../fleet-watch/outliers.js';
import { keepMessageIds, keptMessageCounts } from '../pipeline/prepare.js';

export type BreakerListener = (w: WorkerState, to: BreakerState, cause: TransitionCause, from: BreakerState) => void;

export interface Fleet {
  registry: WorkerRegistry;
  metrics: GatewayMetrics;
  /** When replicas share breakers through Redis: publish this replica's transitions with `listener`. */
  shareBreakers(listener: BreakerListener): void;
}

/** The worker registry (breakers logged and counted) and the gateway's metrics over it. */
export function buildFleet(config: GatewayConfig, now: () => number, logger: Logger): Fleet {
  let metrics: GatewayMetrics | null = null;
  let shareBreaker: BreakerListener | null = null;
  const registry = new WorkerRegistry(config.workers, {
    staleAfterMs: config.scrape.staleAfterMs,
    now,
    breaker: {
      failuresToOpen: config.circuitBreaker.failuresToOpen,
      coolDownMs: config.circuitBreaker.coolDownMs,
      failureRate: config.circuitBreaker.failureRate,
      overloadBackoffMs: config.circuitBreaker.overloadBackoffMs,
      maxBackoffMs: config.circuitBreaker.maxBackoffMs,
      now,
      onBackoff: (w: WorkerState, ms: number) => logger.info({ worker: w.id, backoffMs: ms }, 'worker overloaded (503/429): backed off'),
      onTransition: (w: WorkerState, to: BreakerState, cause: TransitionCause, from: BreakerState) => {
        metrics?.breakerTransitions.labels(w.id, to).inc();
        if (cause === 'local') logger[to === 'open' ? 'warn' : 'info']({ worker: w.id, state: to }, 'circuit breaker');
        shareBreaker?.(w, to, cause, from);
      },
    },
  });
  metrics = new GatewayMetrics(registry, config.scrape.staleAfterMs, now);
  const m = metrics;
  m.counterFrom('kvgate_log_dropped_bytes_total', 'Log bytes dropped because the log output could not keep up (64 MiB waiting) or failed', () => droppedLogBytes(logger));
  // Process-wide, as the kept ids are (src/tokenizer/chat-tokens.ts): the estimate tokenizer only.
  m.counterFrom('kvgate_tokenizer_kept_message_hits_total', 'Long chat messages (256 characters or more) whose token ids were kept from an earlier request', () => keptMessageCounts().hits);
  m.counterFrom('kvgate_tokenizer_kept_message_misses_total', 'Long chat messages (256 characters or more) tokenized because their ids were not kept', () => keptMessageCounts().misses);
  m.gaugeFrom('kvgate_tokenizer_kept_ids', 'Token ids of long chat messages kept now (at most tokenizers.keptIds; 8 bytes each, plus the text)', () => keptMessageCounts().ids);
  keepMessageIds(config.tokenizers.keptIds);
  return { registry, metrics: m, shareBreakers: (l) => void (shareBreaker = l) };
}

/** The configured policy behind a router; its prefix index and worker fields shown by /admin/workers. */
export function buildRouting(config: GatewayConfig, registry: WorkerRegistry, clock: Clock, rng: Rng, logger: Logger): { policy: Policy; router: Router } {
  let policy: Policy;
  try {
    policy = createPolicy(config.policy.name, config.policy.options);
  } catch (e) {
    // An unknown name or bad options is a configuration mistake, reported like one.
    throw new ConfigError([`policy: ${(e as Error).message}`]);
  }
  const router = new Router({
    policy,
    clock,
    rng,
    staleAfterMs: config.scrape.staleAfterMs,
    onHookError: (hook, id, err) => logger.error({ id, hook, policy: policy.name, err: err instanceof Error ? err.message : String(err) }, 'policy hook failed'),
  });
  const index = policy.prefixIndex;
  if (index) {
    registry.addDescriber((w) => {
      const st = index.workerStatus(w.id);
      return st ? { prefixIndex: { source: st.source, reason: st.reason, blocks: st.blocks, capacity: st.capacity } } : {};
    });
  }
  if (policy.describeWorker) registry.addDescriber((w) => policy.describeWorker?.(w) ?? {});
  return { policy, router };
}

/** The prefill rate the policy measures or assumes for the worker, tokens/s (outliers.ts's default if it has none). */
export function prefillRateOf(policy: Policy, w: WorkerState): number {
  const r = policy.prefillRate?.(w);
  return r !== undefined && r > 0 && Number.isFinite(r) ? r : DEFAULT_PREFILL_TOKENS_PER_SEC;
}
