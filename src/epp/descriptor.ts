/**
 * The wire messages of Envoy's external processing protocol, as kvgate uses them, defined by their
 * field numbers. They follow Envoy's current v3 API (envoyproxy/envoy at 0015fbd5, Envoy ≥ 1.33:
 * `BodyMutation.streamed_response` exists):
 *   api/envoy/service/ext_proc/v3/external_processor.proto   ProcessingRequest/Response and the rest
 *   api/envoy/config/core/v3/base.proto                       HeaderValue (raw_value = 3), HeaderMap,
 *                                                             HeaderValueOption, Metadata
 *   api/envoy/type/v3/http_status.proto                       HttpStatus (code = 1, an enum on the wire)
 *   google/protobuf/struct.proto                              Struct, Value, ListValue
 *   grpc/grpc-proto grpc/health/v1/health.proto               the health service
 * Only what kvgate reads or writes is declared: a field not declared here is skipped on decode, as
 * protobuf's rules have it. The deprecated `HttpHeaders.attributes` (2) and `ProcessingResponse.
 * mode_override` / `override_message_timeout` (9, 10) are left out on purpose.
 * The copy of these files bundled in @grpc/grpc-js-xds predates `streamed_response`, and
 * @grpc/proto-loader would give `google.protobuf.Value` camelCase fields: hence this definition.
 */
import protobuf from 'protobufjs';

const PROTO = `
syntax = "proto3";

package google.protobuf;
message Struct { map<string, Value> fields = 1; }
message Value {
  oneof kind {
    int32 null_value = 1;
    double number_value = 2;
    string string_value = 3;
    bool bool_value = 4;
    Struct struct_value = 5;
    ListValue list_value = 6;
  }
}
message ListValue { repeated Value values = 1; }
message BoolValue { bool value = 1; }
`;

const CORE = `
syntax = "proto3";
package envoy.config.core.v3;
message HeaderValue { string key = 1; string value = 2; bytes raw_value = 3; }
message HeaderMap { repeated HeaderValue headers = 1; }
message HeaderValueOption {
  HeaderValue header = 1;
  google.protobuf.BoolValue append = 2;
  // HeaderAppendAction: APPEND_IF_EXISTS_OR_ADD = 0, ADD_IF_ABSENT = 1, OVERWRITE_IF_EXISTS_OR_ADD = 2, OVERWRITE_IF_EXISTS = 3
  int32 append_action = 3;
  bool keep_empty_value = 4;
}
message Metadata { map<string, google.protobuf.Struct> filter_metadata = 1; }
`;

const TYPE = `
syntax = "proto3";
package envoy.type.v3;
message HttpStatus { int32 code = 1; }
`;

const EXT_PROC = `
syntax = "proto3";
package envoy.service.ext_proc.v3;
message ProtocolConfiguration {
  // BodySendMode: NONE = 0, STREAMED = 1, BUFFERED = 2, BUFFERED_PARTIAL = 3, FULL_DUPLEX_STREAMED = 4, GRPC = 5
  int32 request_body_mode = 1;
  int32 response_body_mode = 2;
  bool send_body_without_waiting_for_header_response = 3;
}
message ProcessingRequest {
  oneof request {
    HttpHeaders request_headers = 2;
    HttpHeaders response_headers = 3;
    HttpBody request_body = 4;
    HttpBody response_body = 5;
    HttpTrailers request_trailers = 6;
    HttpTrailers response_trailers = 7;
  }
  envoy.config.core.v3.Metadata metadata_context = 8;
  map<string, google.protobuf.Struct> attributes = 9;
  bool observability_mode = 10;
  ProtocolConfiguration protocol_config = 11;
}
message ProcessingResponse {
  oneof response {
    HeadersResponse request_headers = 1;
    HeadersResponse response_headers = 2;
    BodyResponse request_body = 3;
    BodyResponse response_body = 4;
    TrailersResponse request_trailers = 5;
    TrailersResponse response_trailers = 6;
    ImmediateResponse immediate_response = 7;
  }
  google.protobuf.Struct dynamic_metadata = 8;
}
message HttpHeaders { envoy.config.core.v3.HeaderMap headers = 1; bool end_of_stream = 3; }
message HttpBody { bytes body = 1; bool end_of_stream = 2; }
message HttpTrailers { envoy.config.core.v3.HeaderMap trailers = 1; }
message HeadersResponse { CommonResponse response = 1; }
message BodyResponse { CommonResponse response = 1; }
message TrailersResponse { HeaderMutation header_mutation = 1; }
message CommonResponse {
  // ResponseStatus: CONTINUE = 0, CONTINUE_AND_REPLACE = 1
  int32 status = 1;
  HeaderMutation header_mutation = 2;
  BodyMutation body_mutation = 3;
  envoy.config.core.v3.HeaderMap trailers = 4;
  bool clear_route_cache = 5;
}
message ImmediateResponse {
  envoy.type.v3.HttpStatus status = 1;
  HeaderMutation headers = 2;
  bytes body = 3;
  GrpcStatus grpc_status = 4;
  string details = 5;
}
message GrpcStatus { uint32 status = 1; }
message HeaderMutation {
  repeated envoy.config.core.v3.HeaderValueOption set_headers = 1;
  repeated string remove_headers = 2;
}
message StreamedBodyResponse { bytes body = 1; bool end_of_stream = 2; }
message BodyMutation {
  oneof mutation {
    bytes body = 1;
    bool clear_body = 2;
    StreamedBodyResponse streamed_response = 3;
  }
}
`;

const HEALTH = `
syntax = "proto3";
package grpc.health.v1;
message HealthCheckRequest { string service = 1; }
message HealthCheckResponse {
  // ServingStatus: UNKNOWN = 0, SERVING = 1, NOT_SERVING = 2, SERVICE_UNKNOWN = 3
  int32 status = 1;
}
`;

const root = new protobuf.Root();
for (const text of [PROTO, CORE, TYPE, EXT_PROC, HEALTH]) protobuf.parse(text, root, { keepCase: true });
root.resolveAll();

/**
 * Protocol names, from GIE pkg/lwepp/metadata/consts.go: the subset hint's namespace and key in
 * the request's metadata_context, the header and the dynamic-metadata namespace/key of the pick,
 * and the key under which the proxy reports the endpoint that served the request.
 */
export const SUBSET_NAMESPACE = 'envoy.lb.subset_hint';
export const SUBSET_KEY = 'x-gateway-destination-endpoint-subset';
export const DESTINATION_NAMESPACE = 'envoy.lb';
export const DESTINATION_KEY = 'x-gateway-destination-endpoint';
export const SERVED_KEY = 'x-gateway-destination-endpoint-served';
/** The largest body chunk sent back in a streamed_response (llm-d-router pkg/common/envoy/chunking.go uses 62,000). */
export const MAX_BODY_CHUNK = 62_000;

/** The full names the gRPC services are registered under. */
export const EXT_PROC_SERVICE = 'envoy.service.ext_proc.v3.ExternalProcessor';
export const HEALTH_SERVICE = 'grpc.health.v1.Health';

export const BodySendMode = { NONE: 0, STREAMED: 1, BUFFERED: 2, BUFFERED_PARTIAL: 3, FULL_DUPLEX_STREAMED: 4, GRPC: 5 } as const;
export const ServingStatus = { UNKNOWN: 0, SERVING: 1, NOT_SERVING: 2, SERVICE_UNKNOWN: 3 } as const;
/** HeaderValueOption.HeaderAppendAction: replace what the request had. */
const OVERWRITE_IF_EXISTS_OR_ADD = 2;

// ---- the messages as plain objects (snake_case, as on the wire) ----

export interface StructValue {
  null_value?: number;
  number_value?: number;
  string_value?: string;
  bool_value?: boolean;
  struct_value?: Struct;
  list_value?: { values?: StructValue[] };
}
export interface Struct {
  fields?: Record<string, StructValue>;
}
export interface HeaderValue {
  key: string;
  value?: string;
  raw_value?: Uint8Array;
}
export interface HeaderValueOption {
  header: HeaderValue;
  append_action?: number;
}
export interface HeaderMutation {
  set_headers?: HeaderValueOption[];
  remove_headers?: string[];
}
export interface HttpHeaders {
  headers?: { headers?: HeaderValue[] };
  end_of_stream?: boolean;
}
export interface HttpBody {
  body?: Uint8Array;
  end_of_stream?: boolean;
}
export interface HttpTrailers {
  trailers?: { headers?: HeaderValue[] };
}
export type RequestKind = 'request_headers' | 'response_headers' | 'request_body' | 'response_body' | 'request_trailers' | 'response_trailers';

export interface ProcessingRequest {
  request_headers?: HttpHeaders;
  response_headers?: HttpHeaders;
  request_body?: HttpBody;
  response_body?: HttpBody;
  request_trailers?: HttpTrailers;
  response_trailers?: HttpTrailers;
  metadata_context?: { filter_metadata?: Record<string, Struct> };
  observability_mode?: boolean;
  protocol_config?: { request_body_mode?: number; response_body_mode?: number; send_body_without_waiting_for_header_response?: boolean };
}
export interface CommonResponse {
  status?: number;
  header_mutation?: HeaderMutation;
  body_mutation?: { body?: Uint8Array; clear_body?: boolean; streamed_response?: { body?: Uint8Array; end_of_stream?: boolean } };
  clear_route_cache?: boolean;
}
export interface ImmediateResponse {
  status: { code: number };
  headers?: HeaderMutation;
  body?: Uint8Array;
  details?: string;
}
export interface ProcessingResponse {
  request_headers?: { response?: CommonResponse };
  response_headers?: { response?: CommonResponse };
  request_body?: { response?: CommonResponse };
  response_body?: { response?: CommonResponse };
  request_trailers?: { header_mutation?: HeaderMutation };
  response_trailers?: { header_mutation?: HeaderMutation };
  immediate_response?: ImmediateResponse;
  dynamic_metadata?: Struct;
}

const ProcessingRequestType = root.lookupType('envoy.service.ext_proc.v3.ProcessingRequest');
const ProcessingResponseType = root.lookupType('envoy.service.ext_proc.v3.ProcessingResponse');
const HealthCheckRequestType = root.lookupType('grpc.health.v1.HealthCheckRequest');
const HealthCheckResponseType = root.lookupType('grpc.health.v1.HealthCheckResponse');

const REQUEST_KINDS: readonly RequestKind[] = ['request_headers', 'response_headers', 'request_body', 'response_body', 'request_trailers', 'response_trailers'];

/** Decodes a ProcessingRequest; throws on bytes that are not one (protobufjs reports where). */
export function decodeProcessingRequest(bytes: Uint8Array): { message: ProcessingRequest; kind: RequestKind | null } {
  const m = ProcessingRequestType.decode(bytes) as unknown as ProcessingRequest & { request?: string };
  // protobufjs names the member of the oneof that was set (the last one on the wire wins).
  const kind = (m.request ?? null) as RequestKind | null;
  return { message: m, kind: kind !== null && REQUEST_KINDS.includes(kind) ? kind : null };
}

export function encodeProcessingRequest(m: ProcessingRequest): Buffer {
  return asNodeBuffer(ProcessingRequestType.encode(m as Record<string, unknown>).finish());
}

export function encodeProcessingResponse(m: ProcessingResponse): Buffer {
  return asNodeBuffer(ProcessingResponseType.encode(m as Record<string, unknown>).finish());
}

/**
 * A body chunk passed back in FULL_DUPLEX_STREAMED — the message sent most often, once per
 * chunk each way — encoded by hand: ProcessingResponse.request_body (3) or .response_body (4) →
 * BodyResponse.response (1) → CommonResponse.body_mutation (3) → BodyMutation.streamed_response (3)
 * → StreamedBodyResponse { body = 1, end_of_stream = 2 }. The same bytes protobufjs writes for
 * `{ [direction]: { response: { body_mutation: { streamed_response: { body, end_of_stream } } } } }`,
 * made without the nested objects, as the message's parts in order: the bytes before the chunk,
 * the chunk itself (not copied), and end_of_stream after it when set. Written one after the other
 * they are the message.
 */
export function streamedBodyParts(direction: 'request_body' | 'response_body', body: Buffer, endOfStream: boolean): Buffer[] {
  // From the innermost message out: each length-delimited field is its tag, its length, its bytes.
  const streamed = (body.length > 0 ? 1 + varintSize(body.length) + body.length : 0) + (endOfStream ? 2 : 0);
  const mutation = 1 + varintSize(streamed) + streamed;
  const common = 1 + varintSize(mutation) + mutation;
  const bodyResponse = 1 + varintSize(common) + common;
  const head = Buffer.allocUnsafe(1 + varintSize(bodyResponse) + bodyResponse - streamed + (body.length > 0 ? 1 + varintSize(body.length) : 0));
  let at = 0;
  const field = (tag: number, length: number): void => {
    head[at++] = tag;
    at = writeVarint(head, at, length);
  };
  field(direction === 'request_body' ? 0x1a : 0x22, bodyResponse); // field 3 or 4, wire type 2
  field(0x0a, common); // BodyResponse.response = 1
  field(0x1a, mutation); // CommonResponse.body_mutation = 3
  field(0x1a, streamed); // BodyMutation.streamed_response = 3
  const parts: Buffer[] = [head];
  if (body.length > 0) {
    field(0x0a, body.length); // StreamedBodyResponse.body = 1
    parts.push(body);
  }
  if (endOfStream) parts.push(END_OF_STREAM); // StreamedBodyResponse.end_of_stream = 2, varint 1
  return parts;
}

const END_OF_STREAM = Buffer.from([0x10, 1]);

/**
 * A body as the streamed body responses that carry it, each given to `write` as
 * streamedBodyParts' parts: chunks of at most MAX_BODY_CHUNK bytes (one empty response for an
 * empty body), end_of_stream on the last when `endOfStream`.
 */
export function writeStreamedBody(direction: 'request_body' | 'response_body', body: Buffer, endOfStream: boolean, write: (parts: Buffer[]) => void): void {
  if (body.length === 0) {
    write(streamedBodyParts(direction, NO_BYTES, endOfStream));
    return;
  }
  for (let at = 0; at < body.length; at += MAX_BODY_CHUNK) {
    const last = at + MAX_BODY_CHUNK >= body.length;
    write(streamedBodyParts(direction, body.subarray(at, Math.min(body.length, at + MAX_BODY_CHUNK)), last && endOfStream));
  }
}

const NO_BYTES = Buffer.alloc(0);

/**
 * A bytes field as a Buffer: protobufjs gives one as a Buffer in Node and an unset one as its
 * default (an empty array); a Uint8Array view is wrapped without copying.
 */
export function bytesField(b: Uint8Array | undefined): Buffer {
  if (b === undefined || b.length === 0) return NO_BYTES;
  if (Buffer.isBuffer(b)) return b;
  return b instanceof Uint8Array ? Buffer.from(b.buffer, b.byteOffset, b.length) : Buffer.from(b);
}

/** Answers that never change (a headers response with nothing to mutate, a trailers response), encoded once. */
export const CONSTANT_RESPONSES = {
  requestHeadersContinue: encodeProcessingResponse({ request_headers: { response: {} } }),
  responseHeadersContinue: encodeProcessingResponse({ response_headers: { response: {} } }),
  responseBodyContinue: encodeProcessingResponse({ response_body: { response: {} } }),
  requestTrailers: encodeProcessingResponse({ request_trailers: {} }),
  responseTrailers: encodeProcessingResponse({ response_trailers: {} }),
} as const;

function varintSize(n: number): number {
  let size = 1;
  while (n >= 0x80) {
    n = Math.floor(n / 0x80);
    size++;
  }
  return size;
}

function writeVarint(out: Buffer, at: number, n: number): number {
  while (n >= 0x80) {
    out[at++] = (n % 0x80) | 0x80;
    n = Math.floor(n / 0x80);
  }
  out[at++] = n;
  return at;
}

/** protobufjs's writer gives a Buffer in Node; taken as is (a plain Uint8Array is wrapped, not copied). */
function asNodeBuffer(b: Uint8Array): Buffer {
  return Buffer.isBuffer(b) ? b : Buffer.from(b.buffer, b.byteOffset, b.length);
}

export function decodeProcessingResponse(bytes: Uint8Array): ProcessingResponse {
  return ProcessingResponseType.decode(bytes) as unknown as ProcessingResponse;
}

export function decodeHealthCheckRequest(bytes: Uint8Array): { service: string } {
  return HealthCheckRequestType.decode(bytes) as unknown as { service: string };
}

export function encodeHealthCheckRequest(service: string): Buffer {
  return asNodeBuffer(HealthCheckRequestType.encode({ service }).finish());
}

export function encodeHealthCheckResponse(status: number): Buffer {
  return asNodeBuffer(HealthCheckResponseType.encode({ status }).finish());
}

export function decodeHealthCheckResponse(bytes: Uint8Array): { status: number } {
  return HealthCheckResponseType.decode(bytes) as unknown as { status: number };
}

// ---- helpers over the plain objects ----

/** A header's value: Envoy sends raw_value; `value` is read when a proxy sets only that. */
export function headerValue(h: HeaderValue): string {
  const raw = h.raw_value;
  return raw !== undefined && raw.length > 0 ? Buffer.from(raw.buffer, raw.byteOffset, raw.length).toString('latin1') : (h.value ?? '');
}

/** A header to set, replacing the request's own (its value in raw_value, as Envoy reads it). */
export function setHeader(key: string, value: string): HeaderValueOption {
  return { header: { key, raw_value: Buffer.from(value, 'latin1') }, append_action: OVERWRITE_IF_EXISTS_OR_ADD };
}

/**
 * A Struct value's strings: a list of strings, or one string (commas are the caller's to split);
 * null when the value is neither. Reads the member of the `kind` oneof that was set (protobufjs
 * names it in `kind` on a decoded message).
 */
export function structStrings(v: StructValue | undefined | null): string[] | null {
  if (v === undefined || v === null) return null;
  const kind = (v as { kind?: string }).kind ?? (v.string_value != null ? 'string_value' : v.list_value != null ? 'list_value' : undefined);
  if (kind === 'string_value') return [v.string_value ?? ''];
  if (kind === 'list_value') return (v.list_value?.values ?? []).flatMap((x) => (typeof x.string_value === 'string' ? [x.string_value] : []));
  return null;
}

/** `{ namespace: { key: value } }` as a Struct of strings (dynamic_metadata). */
export function namespacedStrings(namespace: string, values: Record<string, string>): Struct {
  const inner: Record<string, StructValue> = {};
  for (const [k, v] of Object.entries(values)) inner[k] = { string_value: v };
  return { fields: { [namespace]: { struct_value: { fields: inner } } } };
}
