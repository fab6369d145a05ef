/**
 * The proxy's side of the ext_proc protocol, as a small client: opens a stream to an Endpoint
 * Picker and sends what Envoy's ext_proc filter sends (request headers with the subset hint and the
 * protocol configuration, body chunks, response headers with the served endpoint, response body),
 * and reads the answers one by one. Used by the tests that drive kvgate's EPP message by message,
 * and by the EPP benchmark.
 */
import * as grpc from '@grpc/grpc-js';
import {
  BodySendMode,
  decodeHealthCheckResponse,
  DESTINATION_KEY,
  DESTINATION_NAMESPACE,
  SERVED_KEY,
  SUBSET_KEY,
  SUBSET_NAMESPACE,
  decodeProcessingResponse,
  encodeHealthCheckRequest,
  encodeProcessingRequest,
  EXT_PROC_SERVICE,
  headerValue,
  HEALTH_SERVICE,
  type HeaderValue,
  type ProcessingRequest,
  type ProcessingResponse,
  type Struct,
  type StructValue,
} from './descriptor.js';

const raw = (b: Buffer): Buffer => b;

export interface RequestHeadersOptions {
  /** No body follows (end_of_stream on the headers). */
  endOfStream?: boolean;
  /** envoy.lb.subset_hint / x-gateway-destination-endpoint-subset: a list, or one comma-separated string. */
  subset?: string[] | string;
  /** protocol_config; default FULL_DUPLEX_STREAMED both ways. null: none sent (older proxies). */
  bodyMode?: { request: number; response: number } | null;
}

/** What the picker answered for the request: the pick and the body it passed on, or an ImmediateResponse. */
export interface RequestAnswer {
  /** x-gateway-destination-endpoint as set by the header mutation (null for an ImmediateResponse). */
  endpoint: string | null;
  /** dynamic_metadata envoy.lb / x-gateway-destination-endpoint. */
  metadataEndpoint: string | null;
  /** Every header the mutation sets, by name (lower case). */
  setHeaders: Record<string, string>;
  removeHeaders: string[];
  clearRouteCache: boolean;
  /** The body passed on (streamed_response chunks joined, or BUFFERED's body mutation), and its chunks. */
  body: Buffer;
  chunks: Buffer[];
  immediate: { status: number; headers: Record<string, string>; body: Buffer } | null;
  /** Every message read, in order. */
  messages: ProcessingResponse[];
}

export class ExtProcClient {
  private readonly client: grpc.Client;

  /** `address`: host:port of the ext_proc listener. */
  constructor(readonly address: string) {
    this.client = new grpc.Client(address, grpc.credentials.createInsecure());
  }

  open(): ExtProcStream {
    const call = this.client.makeBidiStreamRequest(`/${EXT_PROC_SERVICE}/Process`, raw, raw);
    return new ExtProcStream(call);
  }

  close(): void {
    this.client.close();
  }
}

export class ExtProcStream {
  private readonly queue: Buffer[] = [];
  private waiter: { resolve: (b: Buffer | null) => void; reject: (e: Error) => void } | null = null;
  private ended = false;
  private error: (Error & { code?: number; details?: string }) | null = null;
  /** The call's final gRPC status. */
  readonly status: Promise<{ code: number; details: string }>;

  constructor(private readonly call: grpc.ClientDuplexStream<Buffer, Buffer>) {
    this.status = new Promise((resolve) => call.on('status', (s: grpc.StatusObject) => resolve({ code: s.code, details: s.details })));
    call.on('data', (b: Buffer) => {
      if (this.waiter) {
        const w = this.waiter;
        this.waiter = null;
        w.resolve(b);
      } else this.queue.push(b);
    });
    call.on('end', () => this.settle(null));
    call.on('error', (e: Error) => this.settle(e));
  }

  /** Send a message as it is. */
  send(m: ProcessingRequest): void {
    this.call.write(encodeProcessingRequest(m));
  }

  /** Send bytes as a message (for malformed ones). */
  sendRaw(bytes: Buffer): void {
    this.call.write(bytes);
  }

  requestHeaders(headers: Record<string, string>, o: RequestHeadersOptions = {}): void {
    const m: ProcessingRequest = { request_headers: { headers: { headers: headerList(headers) }, end_of_stream: o.endOfStream === true } };
    if (o.subset !== undefined) {
      const v: StructValue = Array.isArray(o.subset) ? { list_value: { values: o.subset.map((s) => ({ string_value: s })) } } : { string_value: o.subset };
      m.metadata_context = { filter_metadata: { [SUBSET_NAMESPACE]: { fields: { [SUBSET_KEY]: v } } } };
    }
    const mode = o.bodyMode === undefined ? { request: BodySendMode.FULL_DUPLEX_STREAMED, response: BodySendMode.FULL_DUPLEX_STREAMED } : o.bodyMode;
    if (mode !== null) m.protocol_config = { request_body_mode: mode.request, response_body_mode: mode.response };
    this.send(m);
  }

  /** The body in chunks of `chunkSize` bytes, the last with end_of_stream (unless `endOfStream` is false: trailers follow). */
  requestBody(body: Buffer, chunkSize = 16_384, endOfStream = true): void {
    if (body.length === 0) {
      this.send({ request_body: { body, end_of_stream: endOfStream } });
      return;
    }
    for (let at = 0; at < body.length; at += chunkSize) {
      const last = at + chunkSize >= body.length;
      this.send({ request_body: { body: body.subarray(at, at + chunkSize), end_of_stream: last && endOfStream } });
    }
  }

  requestTrailers(trailers: Record<string, string> = {}): void {
    this.send({ request_trailers: { trailers: { headers: headerList(trailers) } } });
  }

  /** Response headers; `served`: envoy.lb / x-gateway-destination-endpoint-served, as the proxy reports it. */
  responseHeaders(status: number, headers: Record<string, string> = {}, o: { served?: string; endOfStream?: boolean } = {}): void {
    this.send(withServed({ response_headers: { headers: { headers: headerList({ ':status': String(status), ...headers }) }, end_of_stream: o.endOfStream === true } }, o.served));
  }

  /** A response body chunk; `served` as for responseHeaders (a proxy may report it with any message of the response). */
  responseBody(chunk: Buffer, endOfStream: boolean, served?: string): void {
    this.send(withServed({ response_body: { body: chunk, end_of_stream: endOfStream } }, served));
  }

  /** The next answer; null once the server closed the stream cleanly. Rejects with the gRPC error, or after `timeoutMs`. */
  next(timeoutMs = 10_000): Promise<ProcessingResponse | null> {
    const b = this.queue.shift();
    if (b !== undefined) return Promise.resolve(decodeProcessingResponse(b));
    if (this.error) return Promise.reject(this.error);
    if (this.ended) return Promise.resolve(null);
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        reject(new Error(`no ext_proc answer within ${timeoutMs} ms`));
      }, timeoutMs);
      this.waiter = {
        resolve: (x) => {
          clearTimeout(timer);
          resolve(x === null ? null : decodeProcessingResponse(x));
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
    });
  }

  /**
   * Reads the answer to a request: an ImmediateResponse, or the pick (a request-headers response,
   * or BUFFERED's body response) followed by the body's streamed chunks up to end_of_stream (none
   * for a request without a body: `hasBody` false).
   */
  async readAnswer(hasBody = true, timeoutMs = 10_000): Promise<RequestAnswer> {
    const a: RequestAnswer = { endpoint: null, metadataEndpoint: null, setHeaders: {}, removeHeaders: [], clearRouteCache: false, body: Buffer.alloc(0), chunks: [], immediate: null, messages: [] };
    for (;;) {
      const m = await this.next(timeoutMs);
      if (m === null) throw new Error('the stream ended before the answer was complete');
      a.messages.push(m);
      if (m.immediate_response) {
        const ir = m.immediate_response;
        a.immediate = { status: ir.status?.code ?? 0, headers: mutationHeaders(ir.headers?.set_headers ?? []), body: Buffer.from(ir.body ?? []) };
        return a;
      }
      const common = m.request_headers?.response ?? m.request_body?.response;
      const mutation = common?.header_mutation;
      if (mutation?.set_headers?.length) {
        Object.assign(a.setHeaders, mutationHeaders(mutation.set_headers));
        a.removeHeaders.push(...(mutation.remove_headers ?? []));
        a.endpoint = a.setHeaders[DESTINATION_KEY] ?? null;
        a.clearRouteCache = common?.clear_route_cache === true;
        a.metadataEndpoint = structString(m.dynamic_metadata, DESTINATION_NAMESPACE, DESTINATION_KEY);
        if (!hasBody) return a;
      }
      const bm = common?.body_mutation;
      if (m.request_body && bm?.body !== undefined && bm.body !== null && bm.body.length > 0) a.body = Buffer.from(bm.body);
      if (m.request_body && a.endpoint !== null && bm?.streamed_response == null) return a; // BUFFERED: one body response
      const sr = bm?.streamed_response;
      if (sr != null) {
        const chunk = Buffer.from(sr.body ?? []);
        a.chunks.push(chunk);
        if (sr.end_of_stream === true) {
          a.body = Buffer.concat(a.chunks);
          return a;
        }
      }
    }
  }

  /** Half-close: the proxy has nothing more to send. */
  end(): void {
    this.call.end();
  }

  /** Cancel the stream (the proxy's client went away). */
  cancel(): void {
    this.call.cancel();
  }

  private settle(e: Error | null): void {
    if (e) this.error = e;
    else this.ended = true;
    const w = this.waiter;
    this.waiter = null;
    if (w) {
      if (e) w.reject(e);
      else w.resolve(null);
    }
  }
}

/** grpc.health.v1 Check: the status number (1 SERVING, 2 NOT_SERVING); rejects with NOT_FOUND for an unknown service. */
export function checkHealth(address: string, service: string, timeoutMs = 5_000): Promise<number> {
  const client = new grpc.Client(address, grpc.credentials.createInsecure());
  return new Promise<number>((resolve, reject) => {
    client.makeUnaryRequest(`/${HEALTH_SERVICE}/Check`, raw, raw, encodeHealthCheckRequest(service), { deadline: Date.now() + timeoutMs }, (err, res) => {
      client.close();
      if (err) reject(err);
      else resolve(decodeHealthCheckResponse(res!).status);
    });
  });
}

function headerList(h: Record<string, string>): HeaderValue[] {
  return Object.entries(h).map(([key, value]) => ({ key, raw_value: Buffer.from(value, 'latin1') }));
}

function mutationHeaders(set: { header: HeaderValue }[]): Record<string, string> {
  const out: Record<string, string> = {};
  for (const o of set) out[o.header.key.toLowerCase()] = headerValue(o.header);
  return out;
}

function structString(s: Struct | undefined | null, ns: string, key: string): string | null {
  const v = s?.fields?.[ns]?.struct_value?.fields?.[key];
  return typeof v?.string_value === 'string' ? v.string_value : null;
}

export interface ProxiedExchange {
  answer: RequestAnswer;
  /** The worker's status (0 for an ImmediateResponse). */
  status: number;
  /** The response body as the picker echoed it back (FULL_DUPLEX_STREAMED), chunk by chunk. */
  echoed: Buffer;
  /** The response body as the worker sent it. */
  upstream: Buffer;
  /** The stream's final gRPC status. */
  grpc: { code: number; details: string };
}

/**
 * One request as an Envoy-family proxy carries it with an EPP: the request's headers and body to
 * the picker; the body it passes on sent to the endpoint it picked (plain HTTP/1.1 from this
 * process); the worker's response headers and body chunks through the stream as they arrive, each
 * echo read back; then the stream closed. `served`: the proxy retried at that endpoint instead (the
 * request is sent there, and the response headers report it as the one that served).
 */
export async function proxyExchange(
  client: ExtProcClient,
  req: { path: string; body: Buffer | null; headers?: Record<string, string>; subset?: string[] | string; chunkSize?: number; served?: string },
): Promise<ProxiedExchange> {
  const s = client.open();
  const headers = { ':method': req.body === null ? 'GET' : 'POST', ':path': req.path, ':authority': 'kvgate-epp.test', 'content-type': 'application/json', ...(req.headers ?? {}) };
  s.requestHeaders(headers, { endOfStream: req.body === null, subset: req.subset });
  if (req.body !== null) s.requestBody(req.body, req.chunkSize);
  const answer = await s.readAnswer(req.body !== null);
  if (answer.immediate !== null || answer.endpoint === null) {
    s.end();
    return { answer, status: 0, echoed: Buffer.alloc(0), upstream: Buffer.alloc(0), grpc: await s.status };
  }
  const target = req.served ?? answer.endpoint.split(',')[0]!;
  const sent: Record<string, string> = {};
  for (const [k, v] of Object.entries(headers)) if (!k.startsWith(':')) sent[k] = v;
  Object.assign(sent, answer.setHeaders);
  delete sent[DESTINATION_KEY];
  for (const k of answer.removeHeaders) delete sent[k];
  delete sent['content-length'];
  const r = await fetch(`http://${target}${req.path}`, { method: headers[':method'], headers: sent, body: req.body === null ? undefined : answer.body });
  s.responseHeaders(r.status, { 'content-type': r.headers.get('content-type') ?? 'application/json' }, { served: req.served });
  await s.next();
  const upstream: Buffer[] = [];
  const echoed: Buffer[] = [];
  const reader = r.body!.getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    const chunk = Buffer.from(value);
    upstream.push(chunk);
    s.responseBody(chunk, false);
    const m = await s.next();
    echoed.push(Buffer.from(m?.response_body?.response?.body_mutation?.streamed_response?.body ?? []));
  }
  s.responseBody(Buffer.alloc(0), true);
  await s.next();
  s.end();
  return { answer, status: r.status, echoed: Buffer.concat(echoed), upstream: Buffer.concat(upstream), grpc: await s.status };
}

/** `m` with the endpoint that served the request in its metadata (envoy.lb / x-gateway-destination-endpoint-served). */
function withServed(m: ProcessingRequest, served: string | undefined): ProcessingRequest {
  if (served !== undefined) m.metadata_context = { filter_metadata: { [DESTINATION_NAMESPACE]: { fields: { [SERVED_KEY]: { string_value: served } } } } };
  return m;
}
