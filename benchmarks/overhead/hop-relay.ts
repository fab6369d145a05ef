/**
 * The dispatch handler the bare hops relay a worker's answer with (undicihop, poolhop, partshop):
 * the worker's status, content type and length and body bytes passed on as they arrive, with
 * back-pressure; written the way the gateway writes them (src/http/write-batch.ts) when `batched`.
 * `onFirstByte` and `onEnd` let a hop do its own accounting.
 */
import type { IncomingHttpHeaders, ServerResponse } from 'node:http';
import type { Dispatcher } from 'undici';
import { endSoon, holdWrites } from '../../src/http/write-batch.js';

export interface HopRelayHooks {
  onFirstByte?(): void;
  /** Once, when the answer ended or failed; `status` is what the client got. */
  onEnd?(status: number): void;
}

const UPSTREAM_ERROR = '{"error":{"message":"upstream error","type":"server_error","param":null,"code":null}}';

export class HopRelay implements Dispatcher.DispatchHandler {
  private status = 0;
  private started = false;

  constructor(
    private readonly res: ServerResponse,
    private readonly batched: boolean,
    private readonly headers: Record<string, string> = {},
    private readonly hooks: HopRelayHooks = {},
  ) {}

  onRequestStart(): void {}

  onResponseStart(_c: Dispatcher.DispatchController, status: number, h: IncomingHttpHeaders): void {
    this.status = status;
    const ct = h['content-type'];
    const cl = h['content-length'];
    if (ct !== undefined) this.headers['content-type'] = String(ct);
    if (cl !== undefined) this.headers['content-length'] = String(cl);
  }

  onResponseData(c: Dispatcher.DispatchController, chunk: Buffer): void {
    if (!this.started) {
      this.res.writeHead(this.status, this.headers);
      this.started = true;
      this.hooks.onFirstByte?.();
    }
    if (this.batched) holdWrites(this.res.socket);
    if (!this.res.write(chunk)) {
      c.pause();
      this.res.once('drain', () => c.resume());
    }
  }

  onResponseEnd(): void {
    if (!this.started) this.res.writeHead(this.status, this.headers);
    if (this.batched) endSoon(this.res);
    else this.res.end();
    this.hooks.onEnd?.(this.status);
  }

  onResponseError(): void {
    if (this.res.headersSent) this.res.destroy();
    else {
      this.status = 502;
      this.res.writeHead(502, { 'content-type': 'application/json' });
      this.res.end(UPSTREAM_ERROR);
    }
    this.hooks.onEnd?.(this.status);
  }
}
