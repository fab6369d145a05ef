/**
 * The "parts hop" (target `partshop`): kvgate's own parts for a chat request, called one after
 * the other in a single function, with nothing between them — what kvgate's request path would
 * cost if its structure (the request context, stages, admission, the relay attempt's timers,
 * retries and accounting, the connection guard, hooks) were free. It reads the body, parses and
 * validates it with the gateway's schema (zod), renders and tokenizes the prompt as the gateway
 * does (estimate tokenizer, kept messages), routes it with the `kvgate` policy through the Router
 * (block hashes, prefix index, estimates, pick-time reservation, first-token and completion
 * learning), relays it over kvgate's upstream pool with the gateway's write batching, and counts
 * it in request metrics and a pino request line through the gateway's log batcher. It skips
 * everything a demanding user relies on besides: authentication, caps, deadlines, retries, error
 * shapes, client aborts, admission. So it is a floor for kvgate's design with these parts, not a
 * gateway. Run as a child process (bench overhead); it reports its port over IPC. Env:
 * UPSTREAM_URL; PORT (default: any free one), to run it by hand under a profiler.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type ServerResponse } from 'node:http';
import { Registry } from 'prom-client';
import { chatCompletionRequestSchema, validate, type ChatCompletionRequest } from '../../src/api/schemas.js';
import { WorkerState } from '../../src/fleet/worker-state.js';
import { preparePrompt } from '../../src/gateway/pipeline/prepare.js';
import { UpstreamPool, type RelayDispatcher } from '../../src/http/upstream-pool.js';
import { createPolicy } from '../../src/scheduler/registry.js';
import { Router } from '../../src/scheduler/router.js';
import type { RouteRequest } from '../../src/scheduler/types.js';
import { createLogger } from '../../src/telemetry/logger.js';
import { RequestCounter, RequestHistogram } from '../../src/telemetry/request-metrics.js';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import { systemClock } from '../../src/util/clock.js';
import { seededRng } from '../../src/util/rng.js';
import { RequestState } from '../../src/util/state.js';
import { HopRelay } from './hop-relay.js';

const origin = new URL(process.env.UPSTREAM_URL!).origin;
const pool: RelayDispatcher = new UpstreamPool(origin, { connections: 0, keepAliveTimeoutMs: 4_000, connectTimeoutMs: 5_000 });
const logger = createLogger();
const policy = createPolicy('kvgate');
const router = new Router({ policy, clock: systemClock, rng: seededRng(1) });
const worker = new WorkerState({ id: 'up', url: origin, pool: 'default', model: 'bench-model', numGpuBlocks: 30_000, blockSize: 16 });
const workers = [worker];
const registry = new Registry();
const requests = new RequestCounter(registry, { name: 'requests_total', help: 'requests', labelNames: ['route', 'model', 'status'] });
const duration = new RequestHistogram(registry, { name: 'request_seconds', help: 'duration', labelNames: ['route', 'model'], buckets: [0.01, 0.1, 1, 10] });

/** Counts a finished request as the gateway does: request metrics and a request line. */
function finish(id: string, startedAt: number, model: string, status: number): void {
  const ms = systemClock.now() - startedAt;
  requests.series('chat', model, String(status)).inc();
  duration.series('chat', model).observe(ms / 1000);
  logger.info({ id, route: 'chat', model, stream: false, worker: worker.id, attempts: 1, status, durationMs: Math.round(ms * 100) / 100 }, 'request');
}

function refuse(res: ServerResponse, status: number, message: string): void {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify({ error: { message, type: 'invalid_request_error', param: null, code: null } }));
}

const server = createServer({ keepAliveTimeout: 75_000 }, (req, res) => {
  const startedAt = systemClock.now();
  const id = randomUUID();
  const chunks: Buffer[] = [];
  req.on('data', (c: Buffer) => chunks.push(c));
  req.on('end', () => {
    const body = chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks);
    let parsed: unknown;
    try {
      parsed = JSON.parse(body.toString('utf8'));
    } catch {
      return refuse(res, 400, 'invalid JSON');
    }
    const v = validate(chatCompletionRequestSchema, parsed);
    if (!v.ok) return refuse(res, 400, v.message);
    const chat: ChatCompletionRequest = v.value;
    const prompt = preparePrompt('chat', chat, estimateTokenizer, 1024);
    const tokens = prompt.promptTokens;
    const route: RouteRequest = {
      id,
      model: chat.model,
      promptText: prompt.promptText,
      promptTokens: typeof tokens === 'function' ? tokens() : (tokens ?? []),
      maxTokens: prompt.maxTokens,
      state: new RequestState(),
    };
    policy.prepare?.(route, workers);
    const out = router.route(route, workers);
    if (!out.ok) return refuse(res, out.status, out.message);
    const hooks = {
      onFirstByte: () => router.firstToken(id),
      onEnd: (status: number) => {
        router.complete(id, status < 400);
        finish(id, startedAt, chat.model, status);
      },
    };
    pool.dispatch({ method: 'POST', path: req.url ?? '/', headers: { 'content-type': 'application/json' }, body }, new HopRelay(res, true, { 'x-request-id': id }, hooks));
  });
});
server.listen(Number(process.env.PORT ?? 0), '127.0.0.1', () => {
  const a = server.address();
  process.send?.({ port: typeof a === 'object' && a ? a.port : 0 });
});
process.on('disconnect', () => process.exit(0));
