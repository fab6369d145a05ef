/**
 * The response cache as a gateway stage (the policy and the stores are in src/cache/).
 *
 * For each request, after validation and before routing:
 *   - not cacheable (sampled, Cache-Control: no-store, cache disabled for the tenant) → relayed
 *     as usual, `x-kvgate-cache: bypass`;
 *   - a usable entry (same tenant and route, usage present if the request needs it, fresh enough
 *     for max-age) → answered from it, as JSON or as an SSE stream whatever form filled it,
 *     `x-kvgate-cache: hit`, `age` in seconds; no worker is involved;
 *   - an identical request in flight (single-flight) → served from its answer: a streaming
 *     follower of a streaming leader is sent the leader's events as they are relayed (the usage
 *     chunk only if it asked for one), others get the finished answer rendered in their own form;
 *     `x-kvgate-cache: hit`. If the leader's answer does not end normally the follower goes to a
 *     worker itself: as an ordinary miss if nothing was sent yet, else by running its own
 *     request on the side (CaptureResponse) and sending only what completes the answer it had
 *     started — or an SSE error event if the new answer does not continue the old one;
 *   - otherwise a miss (`x-kvgate-cache: miss`): relayed as usual, while a tap assembles the
 *     answer (a streamed one event by event, without delaying the relay); when the response is
 *     over it is stored if it ended normally (upstream 200, every choice finished, no error event,
 *     `[DONE]` for a stream) and is within the tenant's entry size cap.
 * A store that fails or times out is counted and the request is served as if there were no cache
 * (`x-kvgate-cache: bypass`); no request fails because of the cache.
 */
import { ApiError, errors } from '../../api/errors.js';
import { sseErrorEvent } from '../../api/sse.js';
import { remainderChunks, StreamAssembler } from '../../cache/assemble.js';
import { incompleteReason, renderJson, renderSse, SSE_DONE, sseEvent, usageChunk, type CacheEntry, type CompletionBody } from '../../cache/entry.js';
import type { Flight, FlightFollower } from '../../cache/flight.js';
import { parseCacheControl, type CacheRoute } from '../../cache/key.js';
import type { CacheResult } from '../../cache/metrics.js';
import type { CachePlan, ResponseCache } from '../../cache/response-cache.js';
import type { Logger } from '../../telemetry/logger.js';
import type { Clock } from '../../util/clock.js';
import { stateKey } from '../../util/state.js';
import { CaptureResponse } from './capture-response.js';
import { freshOutcome, type RequestContext } from '../../request/context.js';
import type { GatewayStage, StageResult } from '../../request/stage.js';

type KeyedPlan = Extract<CachePlan, { key: string }>;

/** The request's cache plan (bypass, or lookup/refresh with its key), for later stages and hooks. */
export const CACHE_PLAN = stateKey<CachePlan>('cache.plan');

export const CACHE_HEADER = 'x-kvgate-cache';

export interface CacheStageDeps {
  cache: ResponseCache;
  /** Serve a request at a worker (the relay): a follower's own request after its leader failed mid-stream. */
  forward: (ctx: RequestContext) => Promise<void>;
  /** Tokenize and build ctx.routeRequest: the stage runs early, before that. */
  prepare: (ctx: RequestContext) => Promise<void> | undefined;
  clock: Clock;
  logger: Logger;
}

export function cacheStage(deps: CacheStageDeps): GatewayStage {
  return { name: 'response-cache', early: true, handle: (ctx) => handle(deps, ctx) };
}

const includeUsage = (ctx: RequestContext): boolean =>
  (ctx.body as { stream_options?: { include_usage?: boolean } | null }).stream_options?.include_usage === true;

/** Does the answer this request gets need a usage block (JSON always; a stream if asked)? */
const needsUsage = (ctx: RequestContext): boolean => !ctx.stream || includeUsage(ctx);

function mark(d: CacheStageDeps, ctx: RequestContext, header: 'hit' | 'miss' | 'bypass', result: CacheResult): void {
  if (header !== 'hit') ctx.headers[CACHE_HEADER] = header;
  d.cache.metrics?.result(result);
  (ctx.logFields ??= {}).cache = result;
}

/** The route of a request handle() let in (generated text and embeddings: it passes the rest on). */
const route = (ctx: RequestContext): CacheRoute => ctx.kind as CacheRoute;

async function handle(d: CacheStageDeps, ctx: RequestContext): Promise<StageResult> {
  const { cache } = d;
  // vLLM's other endpoints, and Responses API answers (a response may be stored on its worker and
  // continued there by id: an answer from the cache would name a response no worker holds).
  if (ctx.kind === 'passthrough' || ctx.kind === 'responses') return 'continue';
  const plan = cache.plan(ctx.tenant, ctx.kind, ctx.body as Record<string, unknown>, parseCacheControl(ctx.req.headers['cache-control']));
  ctx.state.set(CACHE_PLAN, plan);
  if (plan.action === 'bypass') {
    mark(d, ctx, 'bypass', 'bypass');
    return 'continue';
  }
  const usage = needsUsage(ctx);
  if (plan.action === 'lookup') {
    const r = await cache.lookup(plan.key);
    if (ctx.aborted) return 'handled';
    if (r.kind === 'error') {
      mark(d, ctx, 'bypass', 'error');
      return 'continue';
    }
    if (r.kind === 'hit' && cache.usable(r.entry, plan, usage)) {
      mark(d, ctx, 'hit', 'hit');
      replay(d, ctx, r.entry, true);
      return 'handled';
    }
  }
  // Join an identical request in flight. If its answer fails before this client was sent
  // anything, try once more (another follower may lead by now), then go to a worker as a miss.
  for (let tries = 0; tries < 2; tries++) {
    const flight = cache.joinable(plan.key, usage);
    if (!flight) break;
    if ((await follow(d, ctx, plan, flight)) === 'handled') return 'handled';
    if (ctx.aborted) return 'handled';
  }
  lead(d, ctx, plan);
  return 'continue';
}

/**
 * Rendered forms of entries, kept as long as the entry object lives: the in-memory store hands out
 * the same object on every hit, so a hot entry is rendered once per form.
 */
const rendered = new WeakMap<CacheEntry, { json?: Buffer; sse?: Buffer; sseUsage?: Buffer }>();

function renderedBody(e: CacheEntry, form: 'json' | 'sse' | 'sseUsage'): Buffer {
  let r = rendered.get(e);
  if (!r) rendered.set(e, (r = {}));
  return (r[form] ??= Buffer.from(form === 'json' ? renderJson(e) : renderSse(e, form === 'sseUsage')));
}

/** Answer from an entry, as JSON or SSE. */
function replay(d: CacheStageDeps, ctx: RequestContext, e: CacheEntry, stored: boolean): void {
  const res = ctx.res;
  ctx.status = 200;
  ctx.ttftMs = d.clock.now() - ctx.startedAt;
  if (res.destroyed || res.headersSent) return;
  const age = stored ? String(Math.max(0, Math.floor((Date.now() - e.storedAt) / 1000))) : null;
  const body = renderedBody(e, ctx.stream ? (includeUsage(ctx) ? 'sseUsage' : 'sse') : 'json');
  const headers: Record<string, string> = ctx.stream
    ? { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', 'x-accel-buffering': 'no' }
    : { 'content-type': 'application/json', 'content-length': String(body.length) };
  Object.assign(headers, ctx.headers);
  headers[CACHE_HEADER] = 'hit';
  if (age !== null) headers.age = age;
  res.writeHead(200, headers);
  res.end(body);
}

/**
 * A miss: relay as usual, assemble the answer from the relayed bytes, publish a streamed answer's
 * events to followers, and when the response is over settle the flight and store the answer.
 */
function lead(d: CacheStageDeps, ctx: RequestContext, plan: KeyedPlan): void {
  const { cache } = d;
  mark(d, ctx, 'miss', plan.action === 'refresh' ? 'refresh' : 'miss');
  const cap = plan.settings.maxEntryBytes;
  const flight = cache.open(plan.key, ctx.stream, needsUsage(ctx));
  let tooLarge = false;
  let asm: StreamAssembler | null = null;
  let parts: Buffer[] | null = null;
  let size = 0;
  const tap = (chunk: Buffer): void => {
    if (tooLarge) return;
    if (asm) {
      asm.push(chunk);
      if (asm.bytes <= cap) return;
      // Too large to store. Followers still need the whole answer: keep assembling for them, but
      // stop keeping events for late joiners; with nobody following, stop here.
      if (flight && flight.followerCount > 0 && !flight.done) {
        flight.joinable = false;
        return;
      }
      tooLarge = true;
      asm = null;
      if (flight) cache.land(flight, null);
      return;
    }
    size += chunk.length;
    if (size > cap) {
      tooLarge = true;
      parts = null;
      if (flight) cache.land(flight, null);
      return;
    }
    (parts ??= []).push(chunk);
  };
  if (ctx.stream) asm = new StreamAssembler(route(ctx), flight ? (text, kind) => flight.emit(text, kind, asm !== null && asm.bytes <= cap) : undefined);
  ctx.taps.push(tap);
  ctx.onFinish.push((c) => {
    let body: CacheEntry['body'] | null = null;
    const ok = !c.aborted && c.upstreamStatus === 200 && c.status === 200;
    if (ok && !tooLarge) {
      if (asm) {
        if (asm.complete) body = asm.build();
      } else if (parts) {
        try {
          body = JSON.parse(Buffer.concat(parts).toString('utf8')) as CacheEntry['body'];
        } catch {
          body = null;
        }
      }
      if (body !== null && incompleteReason(body, c.kind as CacheRoute) !== null) body = null;
    }
    const entry = body ? cache.entry(plan, body) : null;
    if (flight) cache.land(flight, entry);
    if (entry && (asm === null || asm.bytes <= cap)) void cache.fill(plan, entry);
    else cache.metrics?.stored(tooLarge || (asm !== null && asm.bytes > cap) ? 'too_large' : 'incomplete');
  });
}

/**
 * Serve a request from an identical request's answer in flight. Resolves 'handled' when the
 * client got its answer (or left), 'fallback' when the leader's answer failed before anything was
 * sent: the caller then sends the request to a worker itself.
 */
function follow(d: CacheStageDeps, ctx: RequestContext, plan: KeyedPlan, flight: Flight): Promise<'handled' | 'fallback'> {
  return new Promise((resolve) => {
    const res = ctx.res;
    const live = ctx.stream && flight.streaming;
    const wantUsage = includeUsage(ctx);
    // What this client was sent so far, assembled (to complete it if the leader fails).
    const sent = live ? new StreamAssembler(route(ctx)) : null;
    let started = false;
    let over = false;
    const finish = (r: 'handled' | 'fallback'): void => {
      if (over) return;
      over = true;
      flight.leave(f);
      if (ctx.abortUpstream === abort) ctx.abortUpstream = null;
      resolve(r);
    };
    const f: FlightFollower = {
      event(text, kind) {
        if (!live || over || kind === 'done' || kind === 'error' || (kind === 'usage' && !wantUsage)) return;
        if (!started) {
          started = true;
          ctx.ttftMs = d.clock.now() - ctx.startedAt;
          res.writeHead(200, {
            'content-type': 'text/event-stream; charset=utf-8',
            'cache-control': 'no-cache',
            'x-accel-buffering': 'no',
            ...ctx.headers,
            [CACHE_HEADER]: 'hit',
          });
        }
        sent!.push(Buffer.from(text));
        res.write(text);
      },
      settle(entry) {
        if (over) return;
        if (ctx.aborted) return finish('handled');
        if (entry) {
          mark(d, ctx, 'hit', 'coalesced');
          if (started) {
            ctx.status = 200;
            res.end(SSE_DONE);
          } else {
            replay(d, ctx, entry, false);
          }
          return finish('handled');
        }
        if (!started) return finish('fallback');
        // The leader failed mid-stream after this client got part of its answer.
        flight.leave(f);
        void complete(d, ctx, plan, sent!.build(), wantUsage).then(() => finish('handled'));
      },
    };
    const abort = (why: 'client' | 'shutdown'): void => {
      if (why === 'shutdown' && started && !res.writableEnded) res.end(sseErrorEvent(errors.shuttingDown()));
      ctx.status = why === 'client' ? 499 : 503;
      finish('handled');
    };
    ctx.abortUpstream = abort;
    flight.join(f);
  });
}

/**
 * A follower's leader failed after the follower was sent part of the answer: run the request at
 * a worker on the side, then send what completes the part already sent (the answer is
 * deterministic, so it continues it) — or, if it does not continue it or fails too, an SSE error
 * event, never a truncated answer that looks complete.
 */
async function complete(d: CacheStageDeps, ctx: RequestContext, plan: KeyedPlan, sentSoFar: CompletionBody, wantUsage: boolean): Promise<void> {
  const res = ctx.res;
  // From here on the client going away (or a shutdown) cancels this request's own attempt.
  let sub: RequestContext | null = null;
  ctx.abortUpstream = (why) => {
    if (!sub) return;
    sub.aborted = true;
    sub.abortReason = why;
    sub.abortUpstream?.(why);
  };
  let failure: ApiError | null = null;
  const capture = new CaptureResponse();
  const asm = new StreamAssembler(route(ctx));
  try {
    await d.prepare(ctx);
  } catch (e) {
    failure = errors.internal((e as Error).message);
  }
  sub = {
    ...ctx,
    ...freshOutcome(),
    res: capture.asServerResponse(),
    taps: [(c) => asm.push(c)],
  };
  if (ctx.aborted) {
    sub.aborted = true;
    sub.abortReason = ctx.abortReason;
  }
  if (failure === null) {
    try {
      await d.forward(sub);
    } catch (e) {
      failure = e instanceof ApiError ? e : errors.internal((e as Error).message);
    }
  }
  ctx.abortUpstream = null;
  ctx.attempts += sub.attempts;
  ctx.decision = sub.decision;
  ctx.workerId = sub.workerId;
  ctx.upstreamStatus = sub.upstreamStatus;
  mark(d, ctx, 'miss', 'miss');
  if (ctx.aborted) {
    if (ctx.abortReason === 'shutdown' && !res.writableEnded) res.end(sseErrorEvent(errors.shuttingDown()));
    ctx.status = ctx.abortReason === 'client' ? 499 : 503;
    return;
  }
  const full = failure === null && sub.status === 200 && sub.upstreamStatus === 200 && asm.complete ? asm.build() : null;
  if (full && incompleteReason(full, route(ctx)) === null) {
    const rest = remainderChunks(sentSoFar, full, route(ctx));
    if (rest) {
      let out = '';
      for (const c of rest) out += sseEvent(c);
      const entry = d.cache.entry(plan, full);
      if (wantUsage) {
        const u = usageChunk(entry);
        if (u) out += sseEvent(u);
      }
      res.end(out + SSE_DONE);
      ctx.status = 200;
      void d.cache.fill(plan, entry);
      return;
    }
    d.logger.warn({ id: ctx.id }, 'single-flight follower: the new answer does not continue the one already sent');
    failure = errors.upstream('the shared answer failed mid-stream, and a new answer to the same request does not continue it', 'upstream_stream_error');
  }
  failure ??= errors.upstream(`the shared answer failed mid-stream, and so did a new request: ${capture.trailer.trim() || `status ${sub.status}`}`, 'upstream_stream_error');
  if (!res.writableEnded) res.end(sseErrorEvent(failure));
  ctx.status = failure.status;
}
