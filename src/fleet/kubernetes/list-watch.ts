/**
 * One kind of Kubernetes object kept current as client-go's reflector keeps it
 * (k8s.io/client-go/tools/cache/reflector.go): list, then watch from the list's
 * resourceVersion; a watch the server ends (its timeoutSeconds, a restart) is resumed from the
 * last version seen; `410 Gone` (that version is compacted away) means list again; any other
 * failure is retried after a backoff, keeping the objects last known. The watch is
 * `@kubernetes/client-node`'s Watch (JSON lines of {type, object} over a streaming GET).
 *
 * A watch that goes silent (no event and no bookmark, as a half-open connection would be) for
 * longer than the timeout the server was asked to keep plus `idleGraceMs` is aborted and resumed.
 */
import { Watch, type KubeConfig } from '@kubernetes/client-node';

/** The part of a Kubernetes object this needs: its identity and version. */
export interface KubeObject {
  metadata?: { name?: string; namespace?: string; resourceVersion?: string; deletionTimestamp?: unknown };
}

export interface ObjectList<T> {
  items: T[];
  metadata?: { resourceVersion?: string };
}

export interface ListWatchOptions<T extends KubeObject> {
  kubeConfig: KubeConfig;
  /** The watch's path, e.g. `/api/v1/namespaces/ns/pods`. */
  path: string;
  /** The same collection, listed (with `fieldSelector` when one is given). */
  list: () => Promise<ObjectList<T>>;
  fieldSelector?: string;
  /** Every change of the set of objects (after a list, and after each watch event). */
  onChange: (objects: ReadonlyMap<string, T>) => void;
  /** A list or watch failed; it is retried after `retryInMs`. */
  onError: (err: Error, retryInMs: number) => void;
  /** Asked of the server per watch (client-go picks 5 to 10 minutes). Default 300. */
  watchTimeoutSeconds?: number;
  /** Silence beyond the watch timeout before the watch is taken for dead. Default 30 s. */
  idleGraceMs?: number;
  /** Backoff after a failure: from `minBackoffMs`, doubling, at most `maxBackoffMs`. Defaults 500 ms, 30 s. */
  minBackoffMs?: number;
  maxBackoffMs?: number;
}

/** What the ListWatch has done, for status pages and tests. */
export interface ListWatchStats {
  lists: number;
  watches: number;
  failures: number;
  lastError: string | null;
  /** The resourceVersion watched from ('' before the first list). */
  resourceVersion: string;
}

export class ListWatch<T extends KubeObject> {
  private readonly objects = new Map<string, T>();
  private readonly watch: Watch;
  private resourceVersion = '';
  private controller: AbortController | null = null;
  private retryTimer: NodeJS.Timeout | null = null;
  private idleTimer: NodeJS.Timeout | null = null;
  private backoffMs: number;
  private stopped = true;
  /** Bumped per watch started: the callbacks of a watch given up on are ignored. */
  private generation = 0;
  readonly stats: ListWatchStats = { lists: 0, watches: 0, failures: 0, lastError: null, resourceVersion: '' };

  constructor(private readonly o: ListWatchOptions<T>) {
    this.watch = new Watch(o.kubeConfig);
    this.backoffMs = o.minBackoffMs ?? 500;
  }

  /** The objects last known, by name. */
  get current(): ReadonlyMap<string, T> {
    return this.objects;
  }

  start(): void {
    if (!this.stopped) return;
    this.stopped = false;
    void this.cycle();
  }

  stop(): void {
    this.stopped = true;
    this.generation++;
    if (this.retryTimer) clearTimeout(this.retryTimer);
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.retryTimer = this.idleTimer = null;
    this.controller?.abort();
    this.controller = null;
  }

  /** List when there is no version to resume from, then watch. */
  private async cycle(): Promise<void> {
    if (this.stopped) return;
    const gen = ++this.generation;
    try {
      if (this.resourceVersion === '') await this.relist();
      if (this.stopped || gen !== this.generation) return;
      await this.startWatch(gen);
    } catch (e) {
      if (gen === this.generation) this.fail(e as Error);
    }
  }

  private async relist(): Promise<void> {
    const list = await this.o.list();
    this.stats.lists++;
    this.objects.clear();
    for (const obj of list.items ?? []) {
      const name = obj.metadata?.name;
      if (name !== undefined) this.objects.set(name, obj);
    }
    this.resourceVersion = list.metadata?.resourceVersion ?? '';
    this.stats.resourceVersion = this.resourceVersion;
    this.o.onChange(this.objects);
  }

  private async startWatch(gen: number): Promise<void> {
    const timeoutSeconds = this.o.watchTimeoutSeconds ?? 300;
    const params: Record<string, string | number | boolean> = { resourceVersion: this.resourceVersion, allowWatchBookmarks: true, timeoutSeconds };
    if (this.o.fieldSelector !== undefined) params.fieldSelector = this.o.fieldSelector;
    this.stats.watches++;
    this.armIdle(gen, timeoutSeconds);
    const controller = await this.watch.watch(
      this.o.path,
      params,
      (type: string, obj: T & { code?: number; message?: string }) => this.onEvent(gen, type, obj, timeoutSeconds),
      (err: (Error & { statusCode?: number }) | null) => this.onDone(gen, err),
    );
    if (gen === this.generation) this.controller = controller;
    else controller.abort();
  }

  private onEvent(gen: number, type: string, obj: T & { code?: number; message?: string }, timeoutSeconds: number): void {
    if (gen !== this.generation) return;
    this.armIdle(gen, timeoutSeconds);
    // A watch-level error (metav1.Status); 410: the version is gone, list again when the watch ends.
    if (type === 'ERROR') {
      if (obj.code === 410) this.resourceVersion = '';
      else this.stats.lastError = `watch error ${obj.code ?? ''}: ${obj.message ?? ''}`.trim();
      return;
    }
    const rv = obj.metadata?.resourceVersion;
    if (rv !== undefined && rv !== '') this.resourceVersion = this.stats.resourceVersion = rv;
    if (type === 'BOOKMARK') return;
    const name = obj.metadata?.name;
    if (name === undefined) return;
    if (type === 'DELETED') {
      if (!this.objects.delete(name)) return;
    } else if (type === 'ADDED' || type === 'MODIFIED') this.objects.set(name, obj);
    else return;
    this.backoffMs = this.o.minBackoffMs ?? 500;
    this.o.onChange(this.objects);
  }

  private onDone(gen: number, err: (Error & { statusCode?: number }) | null): void {
    if (gen !== this.generation || this.stopped) return;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.controller = null;
    if (err && err.name === 'AbortError') return;
    if (err && err.statusCode === 410) this.resourceVersion = '';
    else if (err) {
      this.fail(err);
      return;
    }
    // Ended by the server: resume from the last version (or list again after a 410).
    void this.cycle();
  }

  private armIdle(gen: number, timeoutSeconds: number): void {
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.idleTimer = setTimeout(() => {
      if (gen !== this.generation) return;
      this.fail(new Error(`watch of ${this.o.path} silent for ${timeoutSeconds} s and more`));
    }, timeoutSeconds * 1000 + (this.o.idleGraceMs ?? 30_000));
    this.idleTimer.unref();
  }

  private fail(err: Error): void {
    if (this.stopped) return;
    this.generation++;
    this.controller?.abort();
    this.controller = null;
    if (this.idleTimer) clearTimeout(this.idleTimer);
    this.stats.failures++;
    this.stats.lastError = err.message;
    const wait = this.backoffMs;
    this.backoffMs = Math.min(this.backoffMs * 2, this.o.maxBackoffMs ?? 30_000);
    this.o.onError(err, wait);
    this.retryTimer = setTimeout(() => {
      this.retryTimer = null;
      void this.cycle();
    }, wait);
    this.retryTimer.unref();
  }
}
