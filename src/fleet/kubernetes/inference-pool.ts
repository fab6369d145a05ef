/**
 * An InferencePool (inference.networking.k8s.io/v1) and its pods, read as the Gateway API
 * Inference Extension reads them (kubernetes-sigs/gateway-api-inference-extension v1.6:
 * api/v1/inferencepool_types.go; pkg/lwepp/datastore/datastore.go, controller/pod_reconciler.go,
 * util/pod/pod.go): the pool's `selector.matchLabels` picks pods in its own namespace; each pod
 * that is Ready (condition Ready=True, not being deleted) and has an IP is one endpoint per target
 * port, `podIP:port`; the annotation `inference.networking.k8s.io/active-ports` narrows a pod to
 * some of the target ports.
 */
import type { KubeObject } from './list-watch.js';

export const INFERENCE_POOL_GROUP = 'inference.networking.k8s.io';
export const INFERENCE_POOL_VERSION = 'v1';
export const INFERENCE_POOL_PLURAL = 'inferencepools';
/** Which of the pool's target ports a pod serves (comma-separated numbers). */
const ACTIVE_PORTS_ANNOTATION = 'inference.networking.k8s.io/active-ports';

/** The fields of an InferencePool this reads. */
export interface InferencePoolObject extends KubeObject {
  spec?: {
    selector?: { matchLabels?: Record<string, string> };
    targetPorts?: Array<{ number?: number }>;
    appProtocol?: string;
  };
}

/** The fields of a Pod this reads. */
export interface PodObject extends KubeObject {
  metadata?: KubeObject['metadata'] & { labels?: Record<string, string>; annotations?: Record<string, string> };
  status?: { podIP?: string; conditions?: Array<{ type?: string; status?: string }> };
}

/** What routing needs of a pool: which pods, which ports. */
export interface PoolSelection {
  matchLabels: Record<string, string>;
  targetPorts: number[];
  appProtocol: string;
}

/** One endpoint of the pool: a ready pod's IP and one of its ports. */
export interface PoolEndpoint {
  pod: string;
  ip: string;
  port: number;
}

/** The pool's selector and ports, or the reason it selects nothing. */
export function poolSelection(pool: InferencePoolObject): PoolSelection | { problem: string } {
  const matchLabels = pool.spec?.selector?.matchLabels ?? {};
  // The CRD requires at least one label; an empty selector would otherwise match every pod.
  if (Object.keys(matchLabels).length === 0) return { problem: 'spec.selector.matchLabels is empty' };
  const targetPorts = (pool.spec?.targetPorts ?? []).map((p) => p.number).filter((n): n is number => Number.isInteger(n) && n! >= 1 && n! <= 65535);
  if (targetPorts.length === 0) return { problem: 'spec.targetPorts names no port' };
  return { matchLabels, targetPorts, appProtocol: pool.spec?.appProtocol ?? 'http' };
}

function labelsMatch(selector: Record<string, string>, labels: Record<string, string> | undefined): boolean {
  for (const [k, v] of Object.entries(selector)) if (labels?.[k] !== v) return false;
  return true;
}

/** util/pod/pod.go IsPodReady: condition Ready is True and the pod is not being deleted. */
export function podReady(pod: PodObject): boolean {
  if (pod.metadata?.deletionTimestamp !== undefined && pod.metadata.deletionTimestamp !== null) return false;
  const ready = pod.status?.conditions?.find((c) => c.type === 'Ready');
  return ready?.status === 'True';
}

/** The target ports a pod serves: all of them, or those its active-ports annotation names. */
function activePorts(pod: PodObject, targetPorts: readonly number[]): number[] {
  const note = pod.metadata?.annotations?.[ACTIVE_PORTS_ANNOTATION];
  if (note === undefined) return [...targetPorts];
  const named = new Set(note.split(',').map((s) => Number.parseInt(s.trim(), 10)));
  return targetPorts.filter((p) => named.has(p));
}

/**
 * The pool's endpoints among `pods`: matching, ready, with an IP; one per (active) target port,
 * ordered by pod name then port so the same pods always give the same list.
 */
export function poolEndpoints(sel: PoolSelection, pods: Iterable<PodObject>): PoolEndpoint[] {
  const out: PoolEndpoint[] = [];
  for (const pod of pods) {
    const name = pod.metadata?.name;
    const ip = pod.status?.podIP;
    if (name === undefined || ip === undefined || ip === '') continue;
    if (!labelsMatch(sel.matchLabels, pod.metadata?.labels) || !podReady(pod)) continue;
    for (const port of activePorts(pod, sel.targetPorts)) out.push({ pod: name, ip, port });
  }
  return out.sort((a, b) => (a.pod < b.pod ? -1 : a.pod > b.pod ? 1 : a.port - b.port));
}

/** `ip:port` as the endpoint picker protocol writes it (IPv6 in brackets). */
export function hostPort(ip: string, port: number): string {
  return ip.includes(':') ? `[${ip}]:${port}` : `${ip}:${port}`;
}
