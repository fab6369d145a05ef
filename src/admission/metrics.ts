/**
 * Admission's Prometheus metrics — the autoscaling signals (deploy/keda/ scales on the first two):
 *   kvgate_queue_depth{model,priority}            requests waiting in the admission queue
 *   kvgate_fleet_kv_usage{model}                  estimated fleet KV usage, 0..1 (kv-pressure.ts)
 *   kvgate_admission_total{model,priority,decision}
 *       admitted | queued | dequeued | shed | shed_backlog | shed_tpot | queue_full | queue_timeout |
 *       cancelled | evicted | rate_limited   (shed_backlog, shed_tpot: admitted, then shed for the
 *       picked worker's prefill backlog or recent TPOT; evicted: queued, then pushed out of a full
 *       queue by a more important request)
 *   kvgate_admission_queue_seconds{model,priority}  time spent queued (dequeued, expired, cancelled or evicted)
 *   kvgate_rate_limited_total{tenant,limit}       requests refused by a tenant's rate limit, by the
 *       limit that refused them: rpm | tpm | rpd | tpd | concurrent
 * The gauges are computed when Prometheus scrapes, from the controller's state.
 */
import { Gauge, Histogram, type Registry } from 'prom-client';
import { RequestCounter } from '../telemetry/request-metrics.js';
import { PRIORITY_CLASSES, type PriorityClass } from './classes.js';
import type { RefusalReason } from './rate-limit.js';
import type { AdmissionController, AdmissionDecision, AdmissionObserver } from './controller.js';

const LIMIT_LABEL: Record<RefusalReason, string> = { requests: 'rpm', tokens: 'tpm', requestsPerDay: 'rpd', tokensPerDay: 'tpd', concurrent: 'concurrent' };

const QUEUE_BUCKETS = [0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60];

export type AdmissionMetricDecision = AdmissionDecision | 'rate_limited';

export class AdmissionMetrics implements AdmissionObserver {
  /** Counted on every request (request-metrics.ts). */
  private readonly total: RequestCounter;
  private readonly queued: Histogram<'model' | 'priority'>;
  private readonly limited: RequestCounter;

  constructor(
    registry: Registry,
    /** Models to report (the configured ones). */
    models: () => readonly string[],
    controller: () => AdmissionController | null,
  ) {
    this.total = new RequestCounter(registry, {
      name: 'kvgate_admission_total',
      help: 'Admission decisions, by model, priority class and decision (admitted, queued, dequeued, shed, shed_backlog, shed_tpot, queue_full, queue_timeout, cancelled, evicted, rate_limited; shed_backlog and shed_tpot follow an admitted or dequeued)',
      labelNames: ['model', 'priority', 'decision'],
    });
    this.limited = new RequestCounter(registry, {
      name: 'kvgate_rate_limited_total',
      help: "Requests refused (429) by a tenant's rate limit, by tenant and the limit that refused them (rpm, tpm, rpd, tpd, concurrent)",
      labelNames: ['tenant', 'limit'],
    });
    this.queued = new Histogram({
      name: 'kvgate_admission_queue_seconds',
      help: 'Time requests spent in the admission queue, by model and priority class',
      labelNames: ['model', 'priority'],
      buckets: QUEUE_BUCKETS,
      registers: [registry],
    });
    new Gauge({
      name: 'kvgate_queue_depth',
      help: 'Requests waiting in the admission queue, by model and priority class',
      labelNames: ['model', 'priority'],
      registers: [registry],
      collect() {
        const c = controller();
        for (const model of models()) for (const p of PRIORITY_CLASSES) this.set({ model, priority: p }, c?.queueDepth(model, p) ?? 0);
      },
    });
    new Gauge({
      name: 'kvgate_fleet_kv_usage',
      help: 'Estimated KV-cache usage of the model’s routable workers (0..1): last scrape, plus blocks reserved since, less blocks freed since, or the peak of the gateway’s in-flight requests if higher',
      labelNames: ['model'],
      registers: [registry],
      collect() {
        const c = controller();
        if (!c) return;
        for (const model of models()) this.set({ model }, c.usage(model));
      },
    });
  }

  decision(model: string, cls: PriorityClass, d: AdmissionMetricDecision): void {
    this.total.series(model, cls, d).inc();
  }

  rateLimited(tenant: string, reason: RefusalReason): void {
    this.limited.series(tenant, LIMIT_LABEL[reason]).inc();
  }

  waited(model: string, cls: PriorityClass, ms: number): void {
    this.queued.labels(model, cls).observe(ms / 1000);
  }
}
