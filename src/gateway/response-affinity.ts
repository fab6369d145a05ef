/**
 * Responses API continuations go to the worker that holds the response they continue.
 *
 * vLLM keeps a stored response (`store`, its default) in the memory of the worker that produced it,
 * and answers a request naming it in `previous_response_id` only there: any other worker says 404
 * "response not found". So this stage remembers which worker produced each response — the id is
 * the first `"id"` of the answer: the top-level field of a JSON response, the `response.created`
 * event's response in a stream — and routes a continuation only to that worker while it serves the
 * model. A continuation of a response this gateway did not see (another replica's, or one
 * forgotten) is routed as any request, and the worker's 404 is relayed. With replicas sharing
 * Redis (`shared.responses`), the ids this replica has not seen are asked of the shared directory
 * (shared/response-directory.ts), and every id learned here is written to it.
 *
 * Memory: at most `capacity` ids (default 100,000), least recently used out first.
 */
import type { ResponsesRequest } from '../api/responses.js';
import type { ResponseDirectory } from '../shared/response-directory.js';
import type { RequestContext } from './context.js';
import type { GatewayStage, StageResult } from './stages.js';

/** The first `"id":"…"` of an answer (looked for in its first bytes only). */
const ID = /"id"\s*:\s*"([^"\\]{1,256})"/;
const LOOK_BYTES = 4096;

export class ResponseAffinity {
  private readonly workerOf = new Map<string, string>();

  constructor(
    private readonly capacity = 100_000,
    private readonly shared: ResponseDirectory | null = null,
  ) {}

  remember(responseId: string, workerId: string): void {
    this.workerOf.delete(responseId);
    this.workerOf.set(responseId, workerId);
    if (this.workerOf.size > this.capacity) this.workerOf.delete(this.workerOf.keys().next().value!);
  }

  /** The worker that produced `responseId`, if this gateway saw it. */
  workerFor(responseId: string): string | undefined {
    const w = this.workerOf.get(responseId);
    if (w !== undefined) {
      this.workerOf.delete(responseId);
      this.workerOf.set(responseId, w);
    }
    return w;
  }

  get size(): number {
    return this.workerOf.size;
  }

  /** The worker that produced `responseId`: this gateway's memory, else the shared directory. */
  async locate(responseId: string): Promise<string | undefined> {
    const local = this.workerFor(responseId);
    if (local !== undefined || this.shared === null) return local;
    const w = await this.shared.workerFor(responseId);
    if (w !== undefined) this.remember(responseId, w);
    return w;
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
        // Known here (the usual case): no promise.
        const local = this.workerFor(previous);
        if (local !== undefined || this.shared === null) return pin(ctx, local);
        return this.locate(previous).then((w) => pin(ctx, w));
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
      this.remember(m[1]!, ctx.workerId);
      this.shared?.remember(m[1]!, ctx.workerId);
    });
  }
}

/** Route only to `workerId` while it serves the request's model (else as any request). */
function pin(ctx: RequestContext, workerId: string | undefined): StageResult {
  const w = workerId === undefined ? undefined : ctx.candidates.find((c) => c.id === workerId);
  if (w !== undefined) ctx.candidates = [w];
  return 'continue';
}
