/**
 * Responses API continuations go to the worker that holds the response they continue.
 *
 * vLLM keeps a stored response (`store`, its default) in the memory of the worker that produced it,
 * and answers a request naming it in `previous_response_id` only there: any other worker says 404
 * "response not found". So this stage remembers which worker produced each response — the id is
 * the first `"id"` of the answer: the top-level field of a JSON response, the `response.created`
 * event's response in a stream — and routes a continuation only to that worker while it serves the
 * model. With replicas sharing Redis (`shared.responses`), the ids this replica has not seen are
 * asked of the shared directory (shared/response-directory.ts), and every id learned here is
 * written to it; that directory also keeps them across a replica's restart.
 *
 * A response belongs to the tenant whose request wrote it: a continuation naming another tenant's
 * response is answered 404 as vLLM answers an unknown one ("Response with id '…' not found."),
 * without reaching a worker; the stored conversation it would continue is that tenant's. A
 * retrieval or cancellation of another tenant's response is answered the same way
 * (gateway/responses/response-lookup.ts).
 *
 * With tenant keys configured, a continuation whose owner cannot be checked is refused rather than
 * sent on: the worker still holds the response after a gateway restart, and would continue it for
 * whoever names it. An id neither this gateway nor the shared directory knows (or one whose entry
 * names no tenant) is answered 404 `response_not_found`, as OpenAI answers an id the caller does
 * not own — the gateway cannot tell "forgotten" from "never existed" from "someone else's", and
 * must not say which. While the shared directory cannot be asked (Redis away), an id not known
 * here is answered 503 `response_directory_unavailable` with Retry-After: the owner's conversation
 * is not gone, and a 404 would tell them to start it again. With no keys configured (one tenant)
 * an unknown continuation is routed as any request, and the worker's own 404 is relayed.
 *
 * Memory: at most `capacity` ids (default 100,000), least recently used out first.
 */
import { ApiError, echo, errors } from '../../api/errors.js';
import type { ResponsesRequest } from '../../api/responses.js';
import { ResponseDirectoryUnreachable, type ResponseDirectory, type ResponseHolder } from '../../shared/response-directory.js';
import type { RequestContext } from '../../request/context.js';
import type { GatewayStage, StageResult } from '../../request/stage.js';
import { InsertionFront } from '../../util/insertion-front.js';

/** The first `"id":"…"` of an answer (looked for in its first bytes only). */
const ID = /"id"\s*:\s*"([^"\\]{1,256})"/;
const LOOK_BYTES = 4096;
/**
 * Wait before asking the shared directory again for an id it did not have: well above a Redis
 * write's round trip on a loaded host, small beside a model's answer.
 */
const DIRECTORY_RETRY_MS = 50;

export class ResponseAffinity {
  private readonly holders = new Map<string, ResponseHolder>();
  private readonly oldestHolder = new InsertionFront(this.holders);

  constructor(
    private readonly capacity = 100_000,
    private readonly shared: ResponseDirectory | null = null,
    /** A miss in the shared directory is asked again this much later (ms; 0: not asked again). */
    private readonly retryMs = DIRECTORY_RETRY_MS,
    /** True while tenant keys are configured: a continuation must be its owner's, known (read per request). */
    private readonly ownersChecked: () => boolean = () => false,
  ) {}

  remember(responseId: string, holder: ResponseHolder): void {
    this.holders.delete(responseId);
    this.holders.set(responseId, holder);
    if (this.holders.size > this.capacity) this.oldestHolder.shift();
  }

  /** Who holds `responseId`, if this gateway saw it. */
  holderFor(responseId: string): ResponseHolder | undefined {
    const h = this.holders.get(responseId);
    if (h !== undefined) {
      this.holders.delete(responseId);
      this.holders.set(responseId, h);
    }
    return h;
  }

  get size(): number {
    return this.holders.size;
  }

  /**
   * Who holds `responseId`: this gateway's memory, else the shared directory. Not there, the
   * directory is asked once more `retryMs` later: the replica that relayed the answer writes its
   * entry as the answer's first bytes pass, and a client may send the continuation through this
   * replica before that write has landed. Only continuations of ids unknown everywhere wait.
   * Throws ResponseDirectoryUnreachable when the directory cannot be asked.
   */
  async locate(responseId: string): Promise<ResponseHolder | undefined> {
    const local = this.holderFor(responseId);
    if (local !== undefined || this.shared === null) return local;
    let h = await this.shared.holderOf(responseId);
    if (h === undefined && this.retryMs > 0) {
      await new Promise((r) => setTimeout(r, this.retryMs));
      h = this.holderFor(responseId) ?? (await this.shared.holderOf(responseId));
    }
    if (h !== undefined) this.remember(responseId, h);
    return h;
  }

  /** The gateway stage: pins continuations, and learns each answer's id and worker. */
  stage(): GatewayStage {
    return {
      name: 'response-affinity',
      handle: (ctx) => {
        if (ctx.kind !== 'responses') return 'continue';
        this.learn(ctx);
        const previous = (ctx.body as ResponsesRequest).previous_response_id;
        if (typeof previous !== 'string') return 'continue';
        const checked = this.ownersChecked();
        // Known here (the usual case): no promise.
        const local = this.holderFor(previous);
        if (local !== undefined || this.shared === null) return pin(ctx, previous, local, checked);
        return this.locate(previous).then(
          (h) => pin(ctx, previous, h, checked),
          (e: unknown) => {
            if (!(e instanceof ResponseDirectoryUnreachable)) throw e;
            if (checked) throw directoryUnavailable(previous, 'previous_response_id');
            return pin(ctx, previous, undefined, checked);
          },
        );
      },
    };
  }

  /**
   * Read the answer's id from its first bytes and remember it at once: before those bytes reach
   * the client, so a continuation sent the moment the answer ends finds it, through any replica.
   * Taps see only the bodies relayed to the client (a worker's error body is not).
   */
  private learn(ctx: RequestContext): void {
    let head = '';
    let done = false;
    ctx.taps.push((chunk) => {
      if (done) return;
      head += chunk.toString('utf8', 0, Math.min(chunk.length, LOOK_BYTES - head.length));
      const m = ID.exec(head);
      if (m === null && head.length < LOOK_BYTES) return;
      done = true;
      if (m === null || ctx.workerId === null) return;
      const holder = { workerId: ctx.workerId, tenantId: ctx.tenant.id };
      this.remember(m[1]!, holder);
      this.shared?.remember(m[1]!, holder);
    });
  }
}

/**
 * Route only to the holder's worker while it serves the request's model (else as any request); a
 * 503 while it takes no requests (down, circuit open, draining); a response of another tenant's is
 * one that does not exist, and so, with owners checked, is one whose owner is not known.
 */
function pin(ctx: RequestContext, responseId: string, holder: ResponseHolder | undefined, ownersChecked: boolean): StageResult {
  if (holder === undefined) {
    if (ownersChecked) throw responseNotFound(responseId, 'previous_response_id');
    return 'continue';
  }
  if (!mayAccess(holder, ctx.tenant.id, ownersChecked)) throw responseNotFound(responseId, 'previous_response_id');
  const w = ctx.candidates.find((c) => c.id === holder.workerId);
  if (w === undefined) return 'continue';
  // No other worker holds the response: say which one does and why it is not asked.
  if (!w.routable) {
    throw errors.noWorker(
      `the worker that holds response '${echo(responseId)}' (${w.id}) is not taking requests now (${w.draining ? 'draining' : 'down or failing'}); try again later`,
      1,
    );
  }
  ctx.candidates = [w];
  return 'continue';
}

/**
 * True if `tenantId` may use a response `holder` holds. One whose tenant is not known: anyone while
 * owners are not checked (no tenant keys), no one while they are.
 */
export function mayAccess(holder: ResponseHolder, tenantId: string, ownersChecked: boolean): boolean {
  return holder.tenantId === null ? !ownersChecked : holder.tenantId === tenantId;
}

/** The owner of `responseId` cannot be checked now: the shared directory is unreachable. */
export function directoryUnavailable(responseId: string, param: string): ApiError {
  return new ApiError(
    503,
    'overloaded_error',
    'response_directory_unavailable',
    `The owner of response '${echo(responseId)}' cannot be checked now (the shared response directory is unreachable); try again later`,
    param,
    { 'retry-after': '1' },
  );
}

/** vLLM's answer to a response id it does not hold (vllm/entrypoints/openai/responses/serving.py). */
function responseNotFound(responseId: string, param: string): ApiError {
  return new ApiError(404, 'invalid_request_error', 'response_not_found', `Response with id '${echo(responseId)}' not found.`, param);
}
