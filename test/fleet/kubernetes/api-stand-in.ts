/**
 * A stand-in for the Kubernetes API server, the smallest honest one: a real HTTP server on
 * 127.0.0.1 that speaks the list+watch wire protocol for pods and InferencePools in namespaces,
 * as the API server does (k8s.io/apiserver: a list carries `metadata.resourceVersion`; `?watch=true&resourceVersion=N`
 * streams one JSON object per line, `{type: ADDED|MODIFIED|DELETED|BOOKMARK|ERROR, object}`, for
 * every change after N; a version older than the compacted history gets an ERROR event with a
 * 410 Status and the stream ends; `timeoutSeconds` ends a watch; `fieldSelector=metadata.name=X`
 * narrows both). No API server can run here; nothing else of one is modelled (no auth, no
 * admission, no other resources).
 */
import { writeFileSync } from 'node:fs';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';

type Kind = 'pods' | 'inferencepools';
type Obj = { metadata: { name: string; namespace: string; resourceVersion?: string; [k: string]: unknown }; [k: string]: unknown };
interface Change {
  rv: number;
  kind: Kind;
  type: 'ADDED' | 'MODIFIED' | 'DELETED';
  object: Obj;
}
interface Watcher {
  kind: Kind;
  namespace: string;
  name: string | undefined;
  res: ServerResponse;
}

const PATHS: Array<[RegExp, Kind]> = [
  [/^\/api\/v1\/namespaces\/([^/]+)\/pods$/, 'pods'],
  [/^\/apis\/inference\.networking\.k8s\.io\/v1\/namespaces\/([^/]+)\/inferencepools$/, 'inferencepools'],
];

export class ApiStandIn {
  private server: Server | null = null;
  port = 0;
  private rv = 100;
  /** Changes at or below this version are compacted: a watch from before it gets 410. */
  private compactedTo = 0;
  private readonly objects = new Map<string, Obj>();
  private readonly history: Change[] = [];
  private readonly watchers = new Set<Watcher>();
  readonly requests = { lists: { pods: 0, inferencepools: 0 }, watches: { pods: 0, inferencepools: 0 }, watchFrom: [] as string[] };

  async start(port = 0): Promise<void> {
    this.server = createServer((req, res) => this.handle(req, res));
    await new Promise<void>((r) => this.server!.listen(port, '127.0.0.1', r));
    this.port = (this.server.address() as AddressInfo).port;
  }

  /** Gone: every connection cut, new ones refused (the API server unreachable). */
  async stop(): Promise<void> {
    for (const w of this.watchers) w.res.destroy();
    this.watchers.clear();
    const s = this.server;
    this.server = null;
    if (!s) return;
    s.closeAllConnections();
    await new Promise<void>((r) => s.close(() => r()));
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }

  /** A kubeconfig file pointing at this server. */
  writeKubeconfig(file: string, namespace = 'default'): void {
    writeFileSync(
      file,
      [
        'apiVersion: v1',
        'kind: Config',
        'clusters:',
        `- name: stand-in`,
        // client-node refuses plain HTTP unless TLS checks are off (as for `kubectl proxy`).
        `  cluster: { server: "${this.url}", insecure-skip-tls-verify: true }`,
        'users:',
        '- name: tester',
        '  user: { token: "t0ken" }',
        'contexts:',
        '- name: stand-in',
        `  context: { cluster: stand-in, user: tester, namespace: ${namespace} }`,
        'current-context: stand-in',
        '',
      ].join('\n'),
    );
  }

  /** Create or replace an object: ADDED or MODIFIED to the watchers. */
  put(kind: Kind, obj: Obj): void {
    const key = `${kind}/${obj.metadata.namespace}/${obj.metadata.name}`;
    const type = this.objects.has(key) ? 'MODIFIED' : 'ADDED';
    const stored = structuredClone(obj);
    stored.metadata.resourceVersion = String(++this.rv);
    this.objects.set(key, stored);
    this.record({ rv: this.rv, kind, type, object: stored });
  }

  delete(kind: Kind, namespace: string, name: string): void {
    const key = `${kind}/${namespace}/${name}`;
    const prev = this.objects.get(key);
    if (!prev) return;
    this.objects.delete(key);
    const gone = structuredClone(prev);
    gone.metadata.resourceVersion = String(++this.rv);
    this.record({ rv: this.rv, kind, type: 'DELETED', object: gone });
  }

  /** Forget the history so far (etcd compaction): a watch from an older version gets 410 Gone. */
  compact(): void {
    this.compactedTo = this.rv;
    this.history.length = 0;
  }

  /** Cut every watch stream (a load balancer or the server dropping them); the server stays up. */
  dropWatches(): void {
    for (const w of this.watchers) w.res.destroy();
    this.watchers.clear();
  }

  /** A BOOKMARK event to each watcher at the current version. */
  bookmark(): void {
    for (const w of this.watchers) this.send(w.res, { type: 'BOOKMARK', object: { kind: w.kind === 'pods' ? 'Pod' : 'InferencePool', apiVersion: 'v1', metadata: { resourceVersion: String(this.rv) } } });
  }

  private record(c: Change): void {
    this.history.push(c);
    for (const w of this.watchers) if (this.matches(w, c.kind, c.object)) this.send(w.res, { type: c.type, object: c.object });
  }

  private matches(w: { kind: Kind; namespace: string; name: string | undefined }, kind: Kind, o: Obj): boolean {
    return w.kind === kind && o.metadata.namespace === w.namespace && (w.name === undefined || o.metadata.name === w.name);
  }

  private send(res: ServerResponse, event: unknown): void {
    res.write(JSON.stringify(event) + '\n');
  }

  private handle(req: IncomingMessage, res: ServerResponse): void {
    const u = new URL(req.url ?? '/', 'http://x');
    let kind: Kind | undefined;
    let namespace = '';
    for (const [re, k] of PATHS) {
      const m = re.exec(u.pathname);
      if (m) {
        kind = k;
        namespace = decodeURIComponent(m[1]!);
      }
    }
    if (req.method !== 'GET' || !kind) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ kind: 'Status', apiVersion: 'v1', status: 'Failure', code: 404, reason: 'NotFound' }));
      return;
    }
    const fs = u.searchParams.get('fieldSelector');
    const name = fs?.startsWith('metadata.name=') ? fs.slice('metadata.name='.length) : undefined;
    const sel = { kind, namespace, name };
    if (u.searchParams.get('watch') === 'true' || u.searchParams.get('watch') === '1') return this.watch(sel, u, res);
    this.requests.lists[kind]++;
    const items = [...this.objects.entries()].filter(([k, o]) => k.startsWith(`${kind}/`) && this.matches(sel, kind, o)).map(([, o]) => o);
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ kind: kind === 'pods' ? 'PodList' : 'InferencePoolList', apiVersion: 'v1', metadata: { resourceVersion: String(this.rv) }, items }));
  }

  private watch(sel: { kind: Kind; namespace: string; name: string | undefined }, u: URL, res: ServerResponse): void {
    this.requests.watches[sel.kind]++;
    const from = Number(u.searchParams.get('resourceVersion') ?? '0');
    this.requests.watchFrom.push(`${sel.kind}@${from}`);
    res.writeHead(200, { 'content-type': 'application/json', 'transfer-encoding': 'chunked' });
    if (from < this.compactedTo) {
      // What the API server sends for an expired version: a 200 stream with one ERROR event, then the end.
      this.send(res, { type: 'ERROR', object: { kind: 'Status', apiVersion: 'v1', status: 'Failure', message: `too old resource version: ${from} (${this.compactedTo})`, reason: 'Expired', code: 410 } });
      res.end();
      return;
    }
    for (const c of this.history) if (c.rv > from && this.matches(sel, c.kind, c.object)) this.send(res, { type: c.type, object: c.object });
    const w: Watcher = { ...sel, res };
    this.watchers.add(w);
    const timeout = Number(u.searchParams.get('timeoutSeconds') ?? '0');
    const timer = timeout > 0 ? setTimeout(() => res.end(), timeout * 1000) : null;
    res.on('close', () => {
      if (timer) clearTimeout(timer);
      this.watchers.delete(w);
    });
  }
}

/** A pod as the API server returns it: labels, an IP, a Ready condition. */
export function pod(name: string, o: { namespace?: string; labels?: Record<string, string>; ip?: string; ready?: boolean; annotations?: Record<string, string>; deleting?: boolean }): Obj {
  return {
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: {
      name,
      namespace: o.namespace ?? 'llm',
      labels: o.labels ?? { app: 'vllm' },
      ...(o.annotations ? { annotations: o.annotations } : {}),
      ...(o.deleting ? { deletionTimestamp: '2026-12-01T00:00:00Z' } : {}),
    },
    spec: { containers: [{ name: 'vllm', image: 'vllm/vllm-openai' }] },
    status: {
      phase: 'Running',
      ...(o.ip !== undefined ? { podIP: o.ip } : {}),
      conditions: [{ type: 'Ready', status: o.ready === false ? 'False' : 'True' }],
    },
  };
}

/** An InferencePool (inference.networking.k8s.io/v1). */
export function inferencePool(name: string, o: { namespace?: string; matchLabels?: Record<string, string>; ports: number[] }): Obj {
  return {
    apiVersion: 'inference.networking.k8s.io/v1',
    kind: 'InferencePool',
    metadata: { name, namespace: o.namespace ?? 'llm' },
    spec: {
      selector: { matchLabels: o.matchLabels ?? { app: 'vllm' } },
      targetPorts: o.ports.map((number) => ({ number })),
      endpointPickerRef: { name: `${name}-epp`, port: { number: 9002 }, failureMode: 'FailClose' },
    },
  };
}
