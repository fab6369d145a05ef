/**
 * One ext_proc stream: one HTTP request and its response, as the proxy sends them, message by
 * message. The order is Header → Body → Trailer in each direction (Envoy's
 * api/envoy/service/ext_proc/v3/external_processor.proto; GIE docs/proposals/
 * 004-endpoint-picker-protocol/README.md; llm-d-router pkg/epp/handlers/server.go):
 *
 *   request_headers ─► request_body … (end_of_stream) [request_trailers] ─► decide ─►
 *     FULL_DUPLEX_STREAMED: request-headers response (clear_route_cache, x-gateway-destination-endpoint,
 *                           Content-Length when the body changed, dynamic_metadata envoy.lb), then the
 *                           body echoed as streamed_response chunks of at most 62,000 bytes, then a
 *                           trailers response if the request had trailers;
 *     BUFFERED:             the headers answered at once (CONTINUE); the whole body answered with the
 *                           same mutation in its body response (and the changed body, if it changed);
 *     or an ImmediateResponse (an error, or a response-cache hit), after which the stream is closed.
 *   response_headers ─► response_body … ─► [response_trailers]: each answered (the body echoed in
 *     FULL_DUPLEX_STREAMED), and read for the response's accounting (response-accounting.ts).
 *
 * Anything else — bytes that are not a ProcessingRequest, a message out of this order, a body mode
 * kvgate does not serve — ends the stream with a gRPC error status (the proxy then fails the
 * request, or lets it through with failure_mode_allow); the process is never at risk. The stream
 * cancelled or closed early releases whatever the request had reserved.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingHttpHeaders } from 'node:http';
import { errors } from '../api/errors.js';
import type { GatewayMembers } from '../gateway/composition/compose.js';
import { finishRequest, inferenceRoute, type RequestLogSampler } from '../gateway/pipeline/handler.js';
import { LiveRequestContext } from '../request/context.js';
import type { FlatFields } from '../telemetry/logger.js';
import {
  BodySendMode,
  CONSTANT_RESPONSES,
  decodeProcessingRequest,
  DESTINATION_NAMESPACE,
  encodeProcessingResponse,
  SERVED_KEY,
  writeStreamedBody,
  bytesField,
  SUBSET_KEY,
  SUBSET_NAMESPACE,
  headerValue,
  structStrings,
  type HeaderValue,
  type ProcessingRequest,
  type ProcessingResponse,
} from './descriptor.js';
import { CollectedResponse, requestHead } from './http-stand-ins.js';
import { immediateError } from './immediate.js';
import type { EppMetrics } from './metrics.js';
import { endpointOf, type Decision, type Picker, type ProxiedRequest } from './picker.js';
import type { PickResponses } from './pick-response.js';
import { ResponseAccounting } from './response-accounting.js';


/** gRPC status codes used (grpc/doc/statuscodes.md). */
const GrpcCode = { INVALID_ARGUMENT: 3, FAILED_PRECONDITION: 9, UNIMPLEMENTED: 12 } as const;

/** Where a stream's answers go (the gRPC call, in server.ts). */
export interface StreamSink {
  /** One encoded ProcessingResponse, or its parts in order. */
  write(bytes: Buffer | readonly Buffer[]): void;
  /** Close the stream cleanly (gRPC OK). */
  end(): void;
  /** Close the stream with a gRPC error status. */
  fail(code: number, details: string): void;
}

export interface StreamEnv {
  g: GatewayMembers;
  picker: Picker;
  metrics: EppMetrics;
  /** What finishRequest counts and logs a request with (made once: the gateway's members, its registry as `fleet`). */
  finishDeps: Parameters<typeof finishRequest>[0];
  sampler: RequestLogSampler;
  line: (fields: FlatFields, msg: string) => void;
  /** The picks' encoded answers (pick-response.ts). */
  picks: PickResponses;
}

type Phase = 'headers' | 'body' | 'deciding' | 'picked' | 'response' | 'done';

class ProtocolError extends Error {
  constructor(
    readonly code: number,
    message: string,
  ) {
    super(message);
  }
}

const EMPTY = Buffer.alloc(0);

export class EppStream {
  private phase: Phase = 'headers';
  private requestMode: number = BodySendMode.FULL_DUPLEX_STREAMED;
  private responseMode: number | null = null;
  private silent = false;
  private method = '';
  private path = '';
  private headers: Record<string, string> = {};
  private chunks: Buffer[] = [];
  private size = 0;
  private subset: ReadonlySet<string> | null = null;
  private hadTrailers = false;
  private ctx: LiveRequestContext | null = null;
  private accounting: ResponseAccounting | null = null;
  /** Counted as a gateway request (an inference request, not one picked by load alone). */
  private counted = true;
  private bodyEndedAt = 0n;
  private outcome = '';

  constructor(
    private readonly env: StreamEnv,
    private readonly sink: StreamSink,
  ) {}

  /** A message from the proxy, as its bytes. */
  onMessage(bytes: Buffer): void {
    if (this.phase === 'done') return;
    let m: ProcessingRequest;
    let kind: ReturnType<typeof decodeProcessingRequest>['kind'];
    try {
      ({ message: m, kind } = decodeProcessingRequest(bytes));
    } catch (e) {
      this.protocolError(new ProtocolError(GrpcCode.INVALID_ARGUMENT, `malformed ProcessingRequest: ${(e as Error).message}`));
      return;
    }
    try {
      if (kind === null) throw new ProtocolError(GrpcCode.INVALID_ARGUMENT, 'a ProcessingRequest must carry one of request_headers, request_body, request_trailers, response_headers, response_body, response_trailers');
      if (m.observability_mode === true) this.silent = true;
      switch (kind) {
        case 'request_headers':
          return this.onRequestHeaders(m);
        case 'request_body':
          return this.onRequestBody(bytesField(m.request_body!.body), m.request_body!.end_of_stream === true);
        case 'request_trailers':
          return this.onRequestTrailers();
        case 'response_headers':
          return this.onResponseHeaders(m);
        case 'response_body':
          return this.onResponseBody(m);
        case 'response_trailers':
          return this.onResponseTrailers(m);
      }
    } catch (e) {
      if (e instanceof ProtocolError) this.protocolError(e);
      else this.protocolError(new ProtocolError(GrpcCode.FAILED_PRECONDITION, `ext_proc stream failed: ${(e as Error).message}`));
    }
  }

  /**
   * The proxy closed its side (half-close: the request and its response are over for it) or
   * cancelled the stream. Whatever the request still held is released; a half-close is answered
   * by closing kvgate's side.
   */
  onClosed(cancelled: boolean): void {
    if (this.phase !== 'done') {
      const ctx = this.ctx;
      if (ctx !== null) {
        if (this.accounting !== null) this.accounting.abandon('client');
        else {
          ctx.aborted = true;
          ctx.abortReason = 'client';
          ctx.status = 499;
          ctx.abortUpstream?.('client');
        }
      }
      this.finish(cancelled ? 'cancelled' : 'closed_early');
    }
    if (!cancelled) this.sink.end();
  }

  // ---- the request ----

  private onRequestHeaders(m: ProcessingRequest): void {
    if (this.phase !== 'headers') throw outOfOrder('request_headers', this.phase);
    const pc = m.protocol_config;
    if (pc !== undefined) {
      this.requestMode = pc.request_body_mode ?? BodySendMode.NONE;
      this.responseMode = pc.response_body_mode ?? BodySendMode.NONE;
      // NONE: the body never comes (the request is picked at its headers, below).
      if (this.requestMode !== BodySendMode.FULL_DUPLEX_STREAMED && this.requestMode !== BodySendMode.BUFFERED && this.requestMode !== BodySendMode.NONE) {
        throw new ProtocolError(GrpcCode.UNIMPLEMENTED, `request_body_mode ${this.requestMode} is not served: configure the ext_proc filter with FULL_DUPLEX_STREAMED (or BUFFERED)`);
      }
    }
    this.readHeaders(m.request_headers!.headers?.headers ?? []);
    this.subset = subsetHint(m);
    const g = this.env.g;
    const route = inferenceRoute(this.path);
    const ctx = new LiveRequestContext(randomUUID(), clientRequestId(this.headers), false, route?.kind ?? 'passthrough', this.path, requestHead(this.headers as IncomingHttpHeaders, this.method, this.path), new CollectedResponse().asServerResponse(), g.clock.now(), EMPTY);
    this.ctx = ctx;
    g.active.add(ctx);
    g.metrics.inflight++;
    if (m.request_headers!.end_of_stream === true || this.requestMode === BodySendMode.NONE) {
      this.bodyEndedAt = process.hrtime.bigint();
      this.phase = 'deciding';
      void this.decide(null);
      return;
    }
    this.phase = 'body';
    // BUFFERED: the proxy waits for this answer before it sends the body.
    if (this.requestMode === BodySendMode.BUFFERED) this.writeBytes(CONSTANT_RESPONSES.requestHeadersContinue);
  }

  private onRequestBody(chunk: Buffer, end: boolean): void {
    if (this.phase !== 'body') throw outOfOrder('request_body', this.phase);
    const limit = this.env.g.config.limits.maxBodyBytes;
    this.size += chunk.length;
    if (this.size > limit) {
      this.answerNow(errors.bodyTooLarge(limit));
      return;
    }
    if (chunk.length > 0) this.chunks.push(chunk);
    if (end) this.endOfBody();
  }

  private onRequestTrailers(): void {
    // Trailers end a body whose last chunk did not say end_of_stream.
    if (this.phase !== 'body') throw outOfOrder('request_trailers', this.phase);
    this.hadTrailers = true;
    this.endOfBody();
  }

  private endOfBody(): void {
    this.bodyEndedAt = process.hrtime.bigint();
    this.phase = 'deciding';
    const body = this.chunks.length === 1 ? this.chunks[0]! : Buffer.concat(this.chunks, this.size);
    this.chunks = [];
    void this.decide(body);
  }

  private async decide(body: Buffer | null): Promise<void> {
    const ctx = this.ctx!;
    const req: ProxiedRequest = { method: this.method, path: this.path, headers: this.headers, body, subset: this.subset };
    let d: Decision;
    try {
      d = await this.env.picker.decide(ctx, req, ctx.res as unknown as CollectedResponse);
    } catch (e) {
      // Picker.decide answers its own failures; this is a bug, kept from the process.
      this.env.g.logger.error({ err: e, id: ctx.id }, 'unexpected error deciding a request');
      d = { kind: 'answer', response: immediateError(errors.internal(String(e))), status: 500, reason: 'rejected-internal' };
    }
    if (this.phase !== 'deciding') {
      // The stream ended meanwhile: a pick made after that must not stay reserved.
      if (d.kind === 'pick' && d.reserved) this.env.g.router.complete(ctx.id, false);
      return;
    }
    if (d.kind === 'gone') return;
    this.env.metrics.decisionSeconds.observe(Number(process.hrtime.bigint() - this.bodyEndedAt) / 1e9);
    if (d.kind === 'answer') {
      this.env.metrics.immediate.labels(String(d.status), d.reason).inc();
      this.write(d.response);
      this.finish('immediate');
      this.sink.end();
      return;
    }
    this.answerPick(d, body);
  }

  private answerPick(d: Extract<Decision, { kind: 'pick' }>, body: Buffer | null): void {
    const ctx = this.ctx!;
    const { g } = this.env;
    if (d.reserved) {
      this.accounting = new ResponseAccounting(
        {
          router: g.router,
          fleet: g.registry,
          metrics: g.metrics,
          clock: g.clock,
          onServedElsewhere: () => this.env.metrics.servedElsewhere.inc(),
          onChargeFailed: (e) => g.logger.warn({ id: ctx.id, err: (e as Error).message }, 'the endpoint that served the request could not be charged with it'),
        },
        ctx,
        d.worker,
      );
      // Shutdown after the grace period: the response's reservation is released, the stream closed.
      ctx.abortUpstream = (why) => {
        this.accounting?.abandon(why);
        this.finish('shutdown');
        this.sink.end();
      };
    } else {
      this.counted = false;
    }
    const value = d.endpoints.join(',');
    // The worker's own credentials (a pool's apiKey) replace the client's key, as the gateway's
    // relay sends them; with tenant keys configured, a client's key never reaches a worker.
    const own = d.worker.upstreamHeaders;
    const removeAuthorization = !g.tenants.open && own.authorization === undefined && own.Authorization === undefined;
    const picks = this.env.picks;
    if (body !== null && this.requestMode === BodySendMode.BUFFERED) {
      const a = picks.answer(value, own, removeAuthorization, d.body === null ? null : d.body.length);
      const response = d.body !== null ? { ...a.common, body_mutation: { body: d.body } } : a.common;
      this.write({ request_body: { response }, dynamic_metadata: a.metadata });
      if (this.hadTrailers) this.writeBytes(CONSTANT_RESPONSES.requestTrailers);
    } else if (d.body !== null) {
      const a = picks.answer(value, own, removeAuthorization, d.body.length);
      this.write({ request_headers: { response: a.common }, dynamic_metadata: a.metadata });
    } else {
      // No body (the pick answers the headers), or the body unchanged: the same few answers per worker.
      this.writeBytes(picks.headersResponse(value, own, removeAuthorization));
    }
    if (body !== null && this.requestMode !== BodySendMode.BUFFERED) {
      this.echoBody(d.body ?? body, !this.hadTrailers);
      if (this.hadTrailers) this.writeBytes(CONSTANT_RESPONSES.requestTrailers);
    }
    this.phase = 'picked';
  }

  /** The body back as streamed_response chunks of at most MAX_BODY_CHUNK bytes (request or response direction). */
  private echoBody(body: Buffer, endOfStream: boolean, direction: 'request_body' | 'response_body' = 'request_body'): void {
    writeStreamedBody(direction, body, endOfStream, (parts) => this.writeBytes(parts));
  }

  // ---- the response ----

  private onResponseHeaders(m: ProcessingRequest): void {
    if (this.phase !== 'picked') throw outOfOrder('response_headers', this.phase);
    this.phase = 'response';
    let status = 200;
    for (const h of m.response_headers!.headers?.headers ?? []) {
      if (h.key === ':status') status = Number(headerValue(h)) || 200;
    }
    this.servedFeedback(m);
    this.accounting?.onHeaders(status);
    this.writeBytes(CONSTANT_RESPONSES.responseHeadersContinue);
    if (m.response_headers!.end_of_stream === true) this.responseEnded();
  }

  private onResponseBody(m: ProcessingRequest): void {
    if (this.phase !== 'response') throw outOfOrder('response_body', this.phase);
    const chunk = bytesField(m.response_body!.body);
    const end = m.response_body!.end_of_stream === true;
    this.servedFeedback(m);
    this.accounting?.onChunk(chunk);
    // In FULL_DUPLEX_STREAMED the proxy forwards what kvgate sends back; otherwise it keeps the chunk.
    if (this.streamsResponse()) this.echoBody(chunk, end, 'response_body');
    else this.writeBytes(CONSTANT_RESPONSES.responseBodyContinue);
    if (end) this.responseEnded();
  }

  private onResponseTrailers(m: ProcessingRequest): void {
    if (this.phase !== 'response') throw outOfOrder('response_trailers', this.phase);
    this.servedFeedback(m);
    this.writeBytes(CONSTANT_RESPONSES.responseTrailers);
    this.responseEnded();
  }

  private streamsResponse(): boolean {
    return (this.responseMode ?? this.requestMode) === BodySendMode.FULL_DUPLEX_STREAMED;
  }

  /** envoy.lb / x-gateway-destination-endpoint-served: the endpoint that served the request after the proxy's retries. */
  private servedFeedback(m: ProcessingRequest): void {
    const served = structStrings(m.metadata_context?.filter_metadata?.[DESTINATION_NAMESPACE]?.fields?.[SERVED_KEY])?.[0]?.trim();
    if (served === undefined || served === '') return;
    const a = this.accounting;
    if (a === null) return;
    const w = this.env.g.registry.workers.find((x) => endpointOf(x) === served);
    if (w === undefined) {
      this.env.g.logger.warn({ id: this.ctx!.id, served }, 'the proxy reports an endpoint kvgate does not know served the request');
      return;
    }
    a.servedBy(w);
  }

  private responseEnded(): void {
    this.accounting?.end();
    if (this.accounting === null && this.ctx !== null) this.ctx.status = this.ctx.upstreamStatus ?? 200;
    this.finish(this.counted ? 'picked' : 'no_body');
  }

  // ---- endings ----

  /** Refuse the request at once (the body is too large): an ImmediateResponse, then the stream ends. */
  private answerNow(err: ReturnType<typeof errors.bodyTooLarge>): void {
    this.ctx!.status = err.status;
    this.env.metrics.immediate.labels(String(err.status), 'rejected-bad-request').inc();
    this.write(immediateError(err, this.ctx!.headers));
    this.finish('immediate');
    this.sink.end();
  }

  private protocolError(e: ProtocolError): void {
    const ctx = this.ctx;
    if (ctx !== null) {
      if (this.accounting !== null) this.accounting.abandon('client');
      else if (this.phase === 'deciding') {
        ctx.aborted = true;
        ctx.abortReason = 'client';
        ctx.abortUpstream?.('client');
      }
      if (ctx.status === 0 || ctx.status === 200) ctx.status = 499;
    }
    this.env.g.logger.warn({ id: ctx?.id, code: e.code, err: e.message }, 'ext_proc stream refused');
    this.finish('protocol_error');
    this.sink.fail(e.code, e.message);
  }

  private finish(outcome: string): void {
    if (this.phase === 'done') return;
    this.phase = 'done';
    this.outcome = outcome;
    this.env.metrics.streams.labels(outcome).inc();
    const ctx = this.ctx;
    if (ctx === null) return;
    ctx.abortUpstream = null;
    const g = this.env.g;
    if (this.counted) finishRequest(this.env.finishDeps, ctx, this.env.sampler, this.env.line);
    else {
      g.active.delete(ctx);
      g.metrics.inflight--;
    }
  }

  private write(m: ProcessingResponse): void {
    if (!this.silent) this.sink.write(encodeProcessingResponse(m));
  }

  private writeBytes(encoded: Buffer | readonly Buffer[]): void {
    if (!this.silent) this.sink.write(encoded);
  }

  private readHeaders(list: HeaderValue[]): void {
    for (const h of list) {
      const key = h.key.toLowerCase();
      const value = headerValue(h);
      if (key === ':method') this.method = value;
      else if (key === ':path') {
        const q = value.indexOf('?');
        this.path = q === -1 ? value : value.slice(0, q);
      } else if (!key.startsWith(':')) this.headers[key] = this.headers[key] === undefined ? value : `${this.headers[key]}, ${value}`;
    }
  }

  /** How the stream ended (for tests and logs): '' while it runs. */
  get ended(): string {
    return this.outcome;
  }
}

/**
 * The proxy's subset hint: `metadata_context.filter_metadata["envoy.lb.subset_hint"]
 * ["x-gateway-destination-endpoint-subset"]`, a list of `ip:port` (a comma-separated string is
 * accepted too, as a HeaderToMetadata filter writes it). null when absent: every endpoint may be picked.
 */
function subsetHint(m: ProcessingRequest): ReadonlySet<string> | null {
  const ns = m.metadata_context?.filter_metadata?.[SUBSET_NAMESPACE];
  if (ns === undefined) return null;
  const values = structStrings(ns.fields?.[SUBSET_KEY]);
  if (values === null) return null;
  return new Set(values.flatMap((v) => v.split(',')).map((s) => s.trim()).filter((s) => s !== ''));
}

function outOfOrder(got: string, phase: Phase): ProtocolError {
  const expected: Record<Phase, string> = {
    headers: 'request_headers',
    body: 'request_body or request_trailers',
    deciding: 'nothing until kvgate has answered the request',
    picked: 'response_headers',
    response: 'response_body or response_trailers',
    done: 'nothing more',
  };
  return new ProtocolError(GrpcCode.FAILED_PRECONDITION, `out of order: got ${got}, expected ${expected[phase]} (Header → Body → Trailer)`);
}

const REQUEST_ID_OK = /^[A-Za-z0-9._:-]{1,128}$/;
function clientRequestId(h: Record<string, string>): string | null {
  const given = h['x-client-request-id'] ?? h['x-request-id'];
  return given !== undefined && REQUEST_ID_OK.test(given) ? given : null;
}
