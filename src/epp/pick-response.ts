/**
 * The request-headers response that carries a pick (stream.ts answerPick), encoded once per
 * distinct answer: with the body unchanged it depends only on the endpoints named, the worker's
 * own headers and whether the client's key is removed — a few messages per worker, sent once per
 * request. Encoding them with protobufjs each time (a dozen nested objects, then the writer) was a
 * measurable share of the EPP's CPU per request.
 */
import {
  DESTINATION_KEY,
  DESTINATION_NAMESPACE,
  encodeProcessingResponse,
  namespacedStrings,
  setHeader,
  type CommonResponse,
  type HeaderValueOption,
  type Struct,
} from './descriptor.js';

/** What a pick's answer says: the header mutation and dynamic metadata of any of its forms. */
export interface PickAnswer {
  common: CommonResponse;
  metadata: Struct;
}

/** Distinct answers kept at most; past that the cache starts again (endpoints come and go with reloads). */
const MAX_KEPT = 4096;

export class PickResponses {
  private readonly kept = new Map<string, Buffer>();

  /**
   * The answer for `value` (`ip:port`, or the pick and its fallbacks comma-separated): the
   * header `x-gateway-destination-endpoint` and the dynamic metadata `envoy.lb` set to it,
   * Content-Length when the body changed to `changedLength` bytes, the worker's own headers set,
   * the client's `authorization` removed when `removeAuthorization`.
   */
  answer(value: string, upstreamHeaders: Readonly<Record<string, string>>, removeAuthorization: boolean, changedLength: number | null): PickAnswer {
    const set: HeaderValueOption[] = [setHeader(DESTINATION_KEY, value)];
    if (changedLength !== null) set.push(setHeader('content-length', String(changedLength)));
    for (const [k, v] of Object.entries(upstreamHeaders)) set.push(setHeader(k.toLowerCase(), v));
    const common: CommonResponse = { clear_route_cache: true, header_mutation: removeAuthorization ? { set_headers: set, remove_headers: ['authorization'] } : { set_headers: set } };
    return { common, metadata: namespacedStrings(DESTINATION_NAMESPACE, { [DESTINATION_KEY]: value }) };
  }

  /** The request-headers response for a pick with the body unchanged, encoded. */
  headersResponse(value: string, upstreamHeaders: Readonly<Record<string, string>>, removeAuthorization: boolean): Buffer {
    let key = removeAuthorization ? `r${value}` : `k${value}`;
    for (const k in upstreamHeaders) key += `\u0000${k}\u0000${upstreamHeaders[k]}`;
    let bytes = this.kept.get(key);
    if (bytes === undefined) {
      const a = this.answer(value, upstreamHeaders, removeAuthorization, null);
      bytes = encodeProcessingResponse({ request_headers: { response: a.common }, dynamic_metadata: a.metadata });
      if (this.kept.size >= MAX_KEPT) this.kept.clear();
      this.kept.set(key, bytes);
    }
    return bytes;
  }
}
