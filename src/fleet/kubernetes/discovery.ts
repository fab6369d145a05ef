/**
 * Workers from a Gateway API Inference Extension InferencePool: the pool and the pods of its
 * namespace are watched (list-watch.ts), and each time either changes the pool's endpoints
 * (inference-pool.ts: ready pods matching its selector × its target ports) are handed to `apply`
 * as worker identities, which puts them in the registry beside the configured workers.
 *
 * Pods that are not ready are left out, as the extension's own endpoint picker leaves them out
 * (pod_reconciler.go deletes them from its datastore): the worker is retired like a worker
 * removed from the config (requests it serves finish) and comes back, under the same id, when
 * the pod is ready again. Kubernetes readiness is the authority here; kvgate's own health probes
 * still act on the workers that remain.
 *
 * All pods of the namespace are watched and matched against the selector here, as the
 * extension's controller does, so a change of selector needs no new watch. The API server out of
 * reach is retried with a backoff while the workers last known keep serving; nothing is applied
 * until both the pool and the pods have been listed once.
 */
import { CoreV1Api, CustomObjectsApi, KubeConfig } from '@kubernetes/client-node';
import type { WorkerIdentity } from '../worker-state.js';
import {
  hostPort,
  INFERENCE_POOL_GROUP,
  INFERENCE_POOL_PLURAL,
  INFERENCE_POOL_VERSION,
  poolEndpoints,
  poolSelection,
  type InferencePoolObject,
  type PodObject,
  type PoolEndpoint,
} from './inference-pool.js';
import { ListWatch, type ListWatchOptions, type ObjectList } from './list-watch.js';

/** An InferencePool to watch, and the identity its endpoints get beside their id and URL (config/discovery.ts). */
export interface KubernetesDiscoveryConfig {
  /** Absent: the kubeconfig context's namespace (in a cluster: the pod's own), else `default`. */
  namespace?: string;
  inferencePool: string;
  kubeconfig?: string;
  /** Where each endpoint publishes KV-cache events: ports on its pod's IP (+ n for the n-th target port). */
  kvEvents?: { port: number; replayPort?: number; topic?: string };
  /** Every discovered worker's pool, model, adapters, capacity and upstream headers. */
  template: Omit<WorkerIdentity, 'id' | 'url'>;
}

/** Where it logs (the gateway's pino logger). */
export interface DiscoveryLogger {
  info(fields: object, msg: string): void;
  warn(fields: object, msg: string): void;
}

/** A discovered worker's KV-event sockets (config/types.ts WorkerKvEvents). */
export interface DiscoveredKvEvents {
  workerId: string;
  endpoint: string;
  replayEndpoint?: string;
  topic?: string;
}

/** The list-watch timings (tests shorten them). */
export type WatchTimings = Pick<ListWatchOptions<PodObject>, 'watchTimeoutSeconds' | 'idleGraceMs' | 'minBackoffMs' | 'maxBackoffMs'>;

export interface KubernetesDiscoveryOptions {
  config: KubernetesDiscoveryConfig;
  kubeConfig: KubeConfig;
  /** The pool's endpoints now, as workers, and their KV-event sockets if configured (called only when they change). */
  apply: (workers: WorkerIdentity[], kvEvents: DiscoveredKvEvents[]) => void;
  logger: DiscoveryLogger;
  timings?: WatchTimings;
}

/** Read the kubeconfig named, else the default (KUBECONFIG, ~/.kube/config, or the pod's service account). Throws if unreadable. */
export function loadKubeConfig(file: string | undefined): KubeConfig {
  const kc = new KubeConfig();
  if (file !== undefined) kc.loadFromFile(file);
  else kc.loadFromDefault();
  if (!kc.getCurrentCluster()) throw new Error(file !== undefined ? `${file}: no current cluster` : 'no kubeconfig found and not running in a cluster');
  return kc;
}

/** A discovered worker's id: `pod.namespace:port` (no `/`, so it fits /admin/workers/{id}/drain; never an id made from a URL). */
function discoveredWorkerId(namespace: string, e: PoolEndpoint): string {
  return `${e.pod}.${namespace}:${e.port}`;
}

export class KubernetesDiscovery {
  readonly name = 'kubernetes-discovery';
  readonly namespace: string;
  private readonly pools: ListWatch<InferencePoolObject>;
  private readonly pods: ListWatch<PodObject>;
  private poolListed = false;
  private podsListed = false;
  private scheduled = false;
  private lastKey: string | null = null;
  /** The reason the pool gives no endpoints, logged once per reason. */
  private lastProblem: string | null = null;
  private stopped = false;
  /** The endpoints last applied. */
  workers: WorkerIdentity[] = [];

  constructor(private readonly o: KubernetesDiscoveryOptions) {
    const kc = o.kubeConfig;
    this.namespace = o.config.namespace ?? kc.getContextObject(kc.getCurrentContext())?.namespace ?? 'default';
    const ns = this.namespace;
    const core = kc.makeApiClient(CoreV1Api);
    const custom = kc.makeApiClient(CustomObjectsApi);
    const fieldSelector = `metadata.name=${o.config.inferencePool}`;
    this.pools = new ListWatch<InferencePoolObject>({
      kubeConfig: kc,
      path: `/apis/${INFERENCE_POOL_GROUP}/${INFERENCE_POOL_VERSION}/namespaces/${ns}/${INFERENCE_POOL_PLURAL}`,
      fieldSelector,
      list: async () =>
        (await custom.listNamespacedCustomObject({ group: INFERENCE_POOL_GROUP, version: INFERENCE_POOL_VERSION, namespace: ns, plural: INFERENCE_POOL_PLURAL, fieldSelector })) as ObjectList<InferencePoolObject>,
      onChange: () => {
        this.poolListed = true;
        this.schedule();
      },
      onError: (err, retryInMs) => this.onError('inferencepools', err, retryInMs),
      ...o.timings,
    });
    this.pods = new ListWatch<PodObject>({
      kubeConfig: kc,
      path: `/api/v1/namespaces/${ns}/pods`,
      list: async () => (await core.listNamespacedPod({ namespace: ns })) as ObjectList<PodObject>,
      onChange: () => {
        this.podsListed = true;
        this.schedule();
      },
      onError: (err, retryInMs) => this.onError('pods', err, retryInMs),
      ...o.timings,
    });
  }

  start(): void {
    this.stopped = false;
    this.o.logger.info({ namespace: this.namespace, inferencePool: this.o.config.inferencePool }, 'kubernetes discovery: watching the InferencePool and its pods');
    this.pools.start();
    this.pods.start();
  }

  close(): void {
    this.stopped = true;
    this.pools.stop();
    this.pods.stop();
  }

  /** For /admin pages and tests: what the watches have done. */
  status(): Record<string, unknown> {
    return {
      namespace: this.namespace,
      inferencePool: this.o.config.inferencePool,
      workers: this.workers.map((w) => w.id),
      problem: this.lastProblem,
      watches: { inferencepools: { ...this.pools.stats }, pods: { ...this.pods.stats } },
    };
  }

  private onError(resource: string, err: Error, retryInMs: number): void {
    this.o.logger.warn(
      { namespace: this.namespace, resource, err: err.message, retryInMs, workers: this.workers.length },
      `kubernetes discovery: cannot list or watch ${resource}; the ${this.workers.length} workers last known stay in routing`,
    );
  }

  /** Many events in one turn (a list) make one update. */
  private schedule(): void {
    if (this.scheduled) return;
    this.scheduled = true;
    setImmediate(() => {
      this.scheduled = false;
      if (!this.stopped) this.update();
    });
  }

  private update(): void {
    if (!this.poolListed || !this.podsListed) return;
    const pool = this.pools.current.get(this.o.config.inferencePool);
    let endpoints: PoolEndpoint[] = [];
    let ports: number[] = [];
    let problem: string | null = null;
    if (!pool) problem = `InferencePool ${this.namespace}/${this.o.config.inferencePool} not found`;
    else {
      const sel = poolSelection(pool);
      if ('problem' in sel) problem = `InferencePool ${this.namespace}/${this.o.config.inferencePool}: ${sel.problem}`;
      else {
        endpoints = poolEndpoints(sel, this.pods.current.values());
        ports = sel.targetPorts;
      }
    }
    if (problem !== this.lastProblem && problem !== null) this.o.logger.warn({ namespace: this.namespace }, `kubernetes discovery: ${problem}; no workers from it`);
    this.lastProblem = problem;
    const workers = endpoints.map((e) => this.identity(e));
    const kvEvents = this.kvEvents(endpoints, workers, ports);
    const key = JSON.stringify([workers.map((w) => [w.id, w.url]), kvEvents]);
    if (key === this.lastKey) return;
    this.lastKey = key;
    this.workers = workers;
    this.o.logger.info({ namespace: this.namespace, inferencePool: this.o.config.inferencePool, workers: workers.map((w) => w.id) }, `kubernetes discovery: ${workers.length} endpoints`);
    this.o.apply(workers, kvEvents);
  }

  private identity(e: PoolEndpoint): WorkerIdentity {
    return { ...this.o.config.template, id: discoveredWorkerId(this.namespace, e), url: `http://${hostPort(e.ip, e.port)}` };
  }

  /** Each endpoint's KV-event sockets: the configured ports on its pod's IP, + n for the pool's n-th target port. */
  private kvEvents(endpoints: readonly PoolEndpoint[], workers: readonly WorkerIdentity[], ports: readonly number[]): DiscoveredKvEvents[] {
    const kv = this.o.config.kvEvents;
    if (!kv) return [];
    return endpoints.map((e, i) => {
      const n = Math.max(0, ports.indexOf(e.port));
      return {
        workerId: workers[i]!.id,
        endpoint: `tcp://${hostPort(e.ip, kv.port + n)}`,
        ...(kv.replayPort !== undefined ? { replayEndpoint: `tcp://${hostPort(e.ip, kv.replayPort + n)}` } : {}),
        ...(kv.topic !== undefined ? { topic: kv.topic } : {}),
      };
    });
  }
}
