/**
 * Watches the config file and reloads the gateway when it changes (and on demand: `kvgate serve`
 * calls reload() on SIGHUP). The whole file is read and validated first; a valid one is applied
 * (config-reload.ts), an invalid one rejected with one log line naming the field, the old config
 * staying entirely.
 *
 * The directory is watched, not the file: editors that save by writing a new file and renaming it
 * over the old one, and Kubernetes, which swaps a ConfigMap volume's `..data` symlink, replace the
 * file's inode, after which a watch on the file itself hears nothing more. Events closer together
 * than `debounceMs` are read once, after the last; a file whose bytes did not change (a touch, a
 * second event for one save) is not reloaded.
 */
import { createHash } from 'node:crypto';
import { watch, readFileSync, type FSWatcher } from 'node:fs';
import { basename, dirname } from 'node:path';
import { ConfigError, type GatewayConfig } from '../../config/index.js';
import type { Logger } from '../../telemetry/logger.js';
import type { ReloadOutcome } from './config-reload.js';

export interface ConfigWatchOptions {
  path: string;
  /** Validate the file's text into a config (throws ConfigError); command-line overrides apply here. */
  parse: (text: string) => GatewayConfig;
  gateway: {
    reloadConfig(next: GatewayConfig, fileHash: string | null): ReloadOutcome;
    rejectConfig(errors: string[], fileHash: string | null): ReloadOutcome;
  };
  logger: Logger;
  /** Watch the file (false: reload() only). */
  watch: boolean;
  debounceMs: number;
  /** SHA-256 of the text the gateway started with. */
  initialHash: string;
}

export function hashConfigText(text: string): string {
  return createHash('sha256').update(text).digest('hex');
}

export class ConfigWatcher {
  private watcher: FSWatcher | null = null;
  private timer: NodeJS.Timeout | null = null;
  /** Hash of the last text read (applied or rejected): the same bytes are not reloaded on a file event. */
  private lastHash: string;

  constructor(private readonly o: ConfigWatchOptions) {
    this.lastHash = o.initialHash;
  }

  start(): void {
    if (!this.o.watch || this.watcher) return;
    const name = basename(this.o.path);
    try {
      this.watcher = watch(dirname(this.o.path), { persistent: false }, (_event, file) => {
        // The file itself, or a ConfigMap's `..data` swap (any name starting with '..').
        if (file !== null && file !== name && !String(file).startsWith('..')) return;
        this.schedule();
      });
      this.watcher.on('error', (e) => this.o.logger.warn({ err: e.message, file: this.o.path }, 'config watch failed: reload with SIGHUP'));
    } catch (e) {
      this.o.logger.warn({ err: (e as Error).message, file: this.o.path }, 'cannot watch the config file: reload with SIGHUP');
    }
  }

  private schedule(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = setTimeout(() => {
      this.timer = null;
      this.reload('file');
    }, this.o.debounceMs);
    this.timer.unref();
  }

  /**
   * Read, validate and apply the file now. `file`: skipped if its bytes are those last read;
   * `signal` (SIGHUP): always read (a key read from an environment variable or a file may have changed).
   */
  reload(reason: 'file' | 'signal'): ReloadOutcome | null {
    let text: string;
    try {
      text = readFileSync(this.o.path, 'utf8');
    } catch (e) {
      // Mid-rename, the file may be briefly absent: a file event follows when it is back.
      if (reason === 'file' && (e as NodeJS.ErrnoException).code === 'ENOENT') return null;
      return this.o.gateway.rejectConfig([`cannot read ${this.o.path}: ${(e as Error).message}`], null);
    }
    const hash = hashConfigText(text);
    if (reason === 'file' && hash === this.lastHash) return null;
    this.lastHash = hash;
    this.o.logger.info({ file: this.o.path, reason, fileHash: hash }, 'config reload: reading');
    let next: GatewayConfig;
    try {
      next = this.o.parse(text);
    } catch (e) {
      if (e instanceof ConfigError) return this.o.gateway.rejectConfig(e.problems, hash);
      return this.o.gateway.rejectConfig([(e as Error).message], hash);
    }
    try {
      return this.o.gateway.reloadConfig(next, hash);
    } catch (e) {
      // A bug, not a bad file (the file was valid): never let it take the gateway down from a timer.
      this.o.logger.error({ err: e as Error, fileHash: hash }, 'config reload failed while applying a valid config');
      return null;
    }
  }

  close(): void {
    this.watcher?.close();
    this.watcher = null;
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
  }
}
