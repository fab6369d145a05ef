/**
 * The simulated worker's KV connector: its side of vLLM's disaggregated-serving exchange, as the
 * NixlConnector does it (vllm-project/vllm `vllm/distributed/kv_transfer/kv_connector/v1/nixl/
 * scheduler.py`, formerly `nixl_connector.py`).
 *
 * Prefill side (a request with `kv_transfer_params.do_remote_decode: true`, max_tokens 1): the
 * engine prefills the prompt and, the request finished by length, keeps its blocks (the engine's
 * `remoteDecode`); the answer carries `kv_transfer_params` {do_remote_prefill: true,
 * do_remote_decode: false, remote_block_ids, remote_engine_id, remote_request_id, remote_host,
 * remote_port, tp_size} (request_finished). The blocks are freed when the decode side reports its
 * read done, or after `holdTimeoutMs` of simulated time: one fixed timeout, as NixlConnector's
 * VLLM_NIXL_ABORT_REQUEST_TIMEOUT (480 s). Newer vLLM holds them on a lease instead
 * (`kv_connector_extra_config.kv_lease_duration`, 30 s, renewed by the decode worker's heartbeats
 * while the request waits there: vllm `docs/design/nixl_kv_cache_lease.md`); the simulated worker
 * sends no heartbeats, so a lease is modelled by a timeout as long as the longest wait.
 *
 * Decode side (`do_remote_prefill: true` with those fields): the engine admits the request with
 * blocks for its whole prompt and reports the pull (the engine's `remotePrefill`, StepResult.kvPulls:
 * the prompt tokens not in its own prefix cache); this connector reads them from the prefill worker,
 * waits the transfer time of the KV transfer model (src/engine/kv-link.ts) — scaled by the worker's
 * speed — tells the prefill worker the read is done, and lets the engine go on (`kvArrived`): the
 * prompt is not recomputed. A read that fails (the prefill worker is gone, or no longer holds the
 * blocks) fails the request, as vLLM's default `kv_load_failure_policy: "fail"` does
 * (vllm/config/kv_transfer.py). A request aborted before its read tells the prefill worker to free
 * the blocks (request_finished with do_remote_prefill still set).
 *
 * vLLM's remote_host / remote_port name the NIXL side channel (VLLM_NIXL_SIDE_CHANNEL_HOST/PORT);
 * the simulated worker's side channel is its own HTTP server, routes POST /kv_transfer/read
 * {remote_request_id, remote_engine_id} → {tokens, block_ids} and POST /kv_transfer/done
 * {remote_request_id, remote_engine_id}.
 *
 * Roles (vLLM's kv_role): `prefill` (kv_producer) honours do_remote_decode, `decode`
 * (kv_consumer) honours do_remote_prefill, `both` (kv_both) both; a request asking for the other
 * side is served as a plain one, as a worker without a KV connector serves it.
 */
import { randomUUID } from 'node:crypto';
import type { KvTransferModel } from '../../engine/kv-link.js';
import type { Engine } from '../../engine/engine.js';
import type { KvPull } from '../../engine/types.js';

export type KvRole = 'prefill' | 'decode' | 'both';

/** The fields of a decode request's kv_transfer_params the pull needs. */
interface RemoteSource {
  engineId: string;
  requestId: string;
  host: string;
  port: number;
}

/** What the engine request of a request with these kv_transfer_params is. */
export interface KvRequestRole {
  remoteDecode?: true;
  remotePrefill?: true;
  source?: RemoteSource;
}

export interface KvConnectorOptions {
  role: KvRole;
  engine: Engine;
  transfer: KvTransferModel;
  /** Simulated ms a prefill's held blocks wait for their read. */
  holdTimeoutMs: number;
  /** The worker's time compression (a transfer of t simulated ms waits t / speed). */
  speed: number;
  tpSize: number;
  /** Step the engine again (blocks were freed, or a pull's KV arrived). */
  wake(): void;
  /** Fail the request whose KV could not be read. */
  failRequest(engineId: string, message: string): void;
}

export interface KvConnectorStats {
  /** Finished prefills whose blocks wait for their read. */
  held: number;
  /** Decode requests whose KV is on its way. */
  pulling: number;
  pulledTokens: number;
  /** Holds freed by their timeout, unread. */
  expired: number;
  /** Reads that failed (the request failed). */
  failedReads: number;
}

/** Reads kv_transfer_params from a request body; null when it carries none this role honours. */
export function kvRequestRole(role: KvRole | null, body: unknown): KvRequestRole | null {
  if (role === null) return null;
  const p = (body as { kv_transfer_params?: unknown }).kv_transfer_params;
  if (p === null || typeof p !== 'object') return null;
  const k = p as Record<string, unknown>;
  if (k.do_remote_decode === true && role !== 'decode') return { remoteDecode: true };
  if (k.do_remote_prefill === true && role !== 'prefill') {
    const { remote_engine_id: engineId, remote_request_id: requestId, remote_host: host, remote_port: port } = k;
    // NixlConnector's update_state_after_alloc: without these the request "will not utilize KVTransfer".
    if (typeof engineId !== 'string' || typeof requestId !== 'string' || typeof host !== 'string' || typeof port !== 'number') return null;
    return { remotePrefill: true, source: { engineId, requestId, host, port } };
  }
  return null;
}

export class SimKvConnector {
  readonly engineId = randomUUID();
  /** Where the side channel is reached (set once the server listens). */
  host = '127.0.0.1';
  port = 0;
  private readonly held = new Map<string, NodeJS.Timeout>();
  /** Decode requests with remote KV, by engine request id: where it is, and how far its read is. */
  private readonly sources = new Map<string, { source: RemoteSource; phase: 'waiting' | 'reading' | 'read' }>();
  private pulling = 0;
  private pulledTokens = 0;
  private expired = 0;
  private failedReads = 0;

  constructor(private readonly o: KvConnectorOptions) {}

  get role(): KvRole {
    return this.o.role;
  }

  stats(): KvConnectorStats {
    return { held: this.held.size, pulling: this.pulling, pulledTokens: this.pulledTokens, expired: this.expired, failedReads: this.failedReads };
  }

  // ---- prefill side ----

  /** A prefill finished with its blocks held: the kv_transfer_params its answer carries. */
  onHeld(engineReqId: string): Record<string, unknown> {
    const blockIds = [...this.o.engine.blocksOf(engineReqId) ?? []];
    this.held.set(engineReqId, setTimeout(() => {
      this.expired++;
      this.free(engineReqId);
    }, this.o.holdTimeoutMs / this.o.speed).unref());
    return {
      do_remote_prefill: true,
      do_remote_decode: false,
      remote_block_ids: blockIds,
      remote_engine_id: this.engineId,
      remote_request_id: engineReqId,
      remote_host: this.host,
      remote_port: this.port,
      tp_size: this.o.tpSize,
    };
  }

  /** A decode worker reads a held prefill: its block ids, or null if this worker holds nothing under that id. */
  read(engineId: unknown, requestId: unknown): { block_ids: number[] } | null {
    if (engineId !== this.engineId || typeof requestId !== 'string' || !this.held.has(requestId)) return null;
    const blocks = this.o.engine.blocksOf(requestId);
    return { block_ids: [...(blocks ?? [])] };
  }

  /** The decode worker's read is done (or it gave up): free the blocks. */
  done(engineId: unknown, requestId: unknown): boolean {
    if (engineId !== this.engineId || typeof requestId !== 'string' || !this.held.has(requestId)) return false;
    this.free(requestId);
    return true;
  }

  private free(requestId: string): void {
    const t = this.held.get(requestId);
    if (t === undefined) return;
    clearTimeout(t);
    this.held.delete(requestId);
    if (this.o.engine.releaseKv(requestId)) this.o.wake();
  }

  // ---- decode side ----

  /** A decode request's engine request, with where its KV is. */
  expect(engineReqId: string, source: RemoteSource): void {
    this.sources.set(engineReqId, { source, phase: 'waiting' });
  }

  /** The engine admitted a remote-prefill request: read its KV, wait the transfer, let it go on. */
  onPull(pull: KvPull): void {
    const p = this.sources.get(pull.id);
    if (p === undefined || p.phase !== 'waiting') return;
    p.phase = 'reading';
    this.pulling++;
    void this.transfer(pull, p.source);
  }

  /** The decode request ended (finished, aborted): a read not begun frees the prefill's blocks. */
  forget(engineReqId: string): void {
    const p = this.sources.get(engineReqId);
    if (p === undefined) return;
    this.sources.delete(engineReqId);
    // A read under way tells the prefill worker itself when it ends.
    if (p.phase === 'waiting') this.notifyDone(p.source);
  }

  private async transfer(pull: KvPull, src: RemoteSource): Promise<void> {
    try {
      const r = await this.call(src, '/kv_transfer/read');
      await r.text();
      if (!r.ok) throw new Error(`the prefill worker ${src.host}:${src.port} holds no KV for ${src.requestId} (status ${r.status})`);
      await new Promise((resolve) => setTimeout(resolve, this.o.transfer.ms(pull.tokens) / this.o.speed));
      // NIXL's notification after the read: the prefill worker frees the blocks.
      this.notifyDone(src);
      if (!this.sources.has(pull.id)) return; // the request ended meanwhile
      this.sources.get(pull.id)!.phase = 'read';
      this.pulledTokens += pull.tokens;
      if (this.o.engine.kvArrived(pull.id)) this.o.wake();
    } catch (e) {
      if (!this.sources.has(pull.id)) return;
      this.sources.delete(pull.id);
      this.failedReads++;
      this.o.failRequest(pull.id, `KV transfer failed: ${(e as Error).message}`);
    } finally {
      this.pulling--;
    }
  }

  private notifyDone(src: RemoteSource): void {
    this.call(src, '/kv_transfer/done').then((r) => r.body?.cancel(), () => undefined);
  }

  private call(src: RemoteSource, path: string): Promise<Response> {
    const host = src.host.includes(':') ? `[${src.host}]` : src.host;
    return fetch(`http://${host}:${src.port}${path}`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ remote_engine_id: src.engineId, remote_request_id: src.requestId }),
      signal: AbortSignal.timeout(10_000),
    });
  }

  close(): void {
    for (const t of this.held.values()) clearTimeout(t);
    this.held.clear();
  }
}
