/**
 * Workers that misbehave at the end of an answer: one ends its streams cleanly but without
 * `data: [DONE]` (a crash between events, a proxy closing early); one answers 429 with
 * `Retry-After: 999999`. Targets: every cut stream ends with an SSE error event
 * (`upstream_stream_truncated`), never passed off as complete; the client's Retry-After is at
 * most MAX_UPSTREAM_RETRY_AFTER_SECONDS (src/gateway/pipeline/relay-attempt.ts).
 */
import { MAX_UPSTREAM_RETRY_AFTER_SECONDS } from '../../../src/gateway/pipeline/relay-attempt.js';
import { ask, MODEL, startGateway, streamChat, Tally, type FaultScenario } from '../harness.js';
import { startStandIn } from './standin-worker.js';

const CHUNK = (text: string) => `data: ${JSON.stringify({ id: 'chatcmpl-standin', object: 'chat.completion.chunk', model: MODEL, choices: [{ index: 0, delta: { content: text }, finish_reason: null }] })}\n\n`;

export const truncatedStream: FaultScenario = {
  name: 'truncated-stream',
  description: 'streams ended without [DONE]; a 429 with Retry-After: 999999',
  async run() {
    const cutter = await startStandIn((_w, _req, _body, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write(CHUNK('Once'));
      setTimeout(() => res.end(CHUNK(' upon')), 10);
    });
    const busy = await startStandIn((_w, _req, _body, res) => {
      res.writeHead(429, { 'content-type': 'application/json', 'retry-after': '999999' });
      res.end('{"error":{"message":"too many requests","type":"rate_limit_error","code":429}}');
    });
    const tally = new Tally();
    let cutCodes: string[] = [];
    let retryAfter: string | null = null;
    let busyStatus = 0;
    const a = await startGateway([cutter.url]);
    try {
      for (let i = 0; i < 5; i++) {
        const o = await ask(a.url, streamChat(i, 0, 8));
        tally.add(o);
        cutCodes.push(o.detail);
      }
    } finally {
      await a.gw.close();
    }
    const b = await startGateway([busy.url]);
    try {
      const r = await fetch(b.url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 8, messages: [{ role: 'user', content: 'hello' }] }),
      });
      busyStatus = r.status;
      retryAfter = r.headers.get('retry-after');
      const text = await r.text();
      tally.add({ kind: r.status === 503 && text.includes('"error"') ? 'error' : 'unanswered', detail: `${r.status} retry-after ${retryAfter}`, status: r.status, ms: 0, end: performance.now(), text });
    } finally {
      await b.gw.close();
      await Promise.all([cutter.close(), busy.close()]);
    }
    cutCodes = [...new Set(cutCodes)];
    return {
      tally,
      figures: {
        'cut streams: what the client saw': cutCodes.join(', '),
        'overloaded worker: status, Retry-After the client got': `${busyStatus}, ${retryAfter ?? '-'}`,
        'Retry-After clamp (s)': MAX_UPSTREAM_RETRY_AFTER_SECONDS,
      },
      checks: {
        'every cut stream ended with an upstream_stream_truncated error event': cutCodes.length === 1 && cutCodes[0] === 'stream upstream_stream_truncated',
        [`Retry-After clamped to at most ${MAX_UPSTREAM_RETRY_AFTER_SECONDS} s`]: retryAfter !== null && Number(retryAfter) <= MAX_UPSTREAM_RETRY_AFTER_SECONDS,
      },
    };
  },
};
