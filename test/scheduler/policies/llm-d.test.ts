/**
 * llm-d's sticky-until-saturated configuration as `llm-d` models it, on hand-built cases.
 * Blocks are 64 estimated tokens of 4 characters: 256 characters of prompt text. A prompt of five
 * blocks is 1,280 characters, 320 estimated tokens.
 *
 *   sticky = workers holding ≥ 0.8 of the prompt's blocks (none: all)
 *   released (all) when best sticky TTFT − best other TTFT > maxTTFTPenaltyMs,
 *     TTFT = in-flight uncached tokens / 15,928 tokens/s
 *   token-load = 1 − (in-flight + this request's uncached tokens) / 4,194,304
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { createPolicy } from '../../../src/scheduler/registry.js';
import type { PolicyOptions, RouteOutcome } from '../../../src/scheduler/types.js';
import { request, router, worker } from '../helpers.js';

/** Block i of prompt text: 256 characters of its own. */
const blk = (i: number) => `b${String(i).padStart(3, '0')}`.repeat(64);
/** A prompt of the given blocks. */
const text = (...ids: number[]) => ids.map(blk).join('');
const picked = (o: RouteOutcome) => (o.ok ? o.decision.worker.id : `refused ${o.status}`);

/**
 * a is prefilling the prompt of blocks 1–5 (320 uncached tokens in flight); b is idle. Where does
 * a prompt sharing the first `shared` of its five blocks go?
 */
function place(shared: number, options: PolicyOptions = {}, firstTokenSeen = false): { to: string; hit: number } {
  const { router: r } = router(createPolicy('llm-d', options));
  const a = worker('a');
  const b = worker('b');
  const first = request([1], { promptText: text(1, 2, 3, 4, 5) });
  assert.ok(r.route(first, [a]).ok);
  if (firstTokenSeen) r.firstToken(first.id);
  const ids = [1, 2, 3, 4, 5].map((i) => (i <= shared ? i : 100 + i));
  const o = r.route(request([1], { promptText: text(...ids) }), [a, b]);
  return { to: picked(o), hit: o.ok ? o.decision.expectedPrefixHit : -1 };
}

test('llm-d: a worker holding ≥ 0.8 of the prompt keeps it, whatever the token load says', () => {
  // 4 of 5 blocks at a: sticky = {a}; a's TTFT 320/15928 s = 20 ms, b's 0: within 18 s → a,
  // although the token load favours b (a: 320 + 64 in flight, b: 320).
  assert.deepEqual(place(4), { to: 'a', hit: 0.8 });
  // 3 of 5 (0.6): nobody sticky → token load over all: a 320 + 128 = 448 > b 320 → b.
  assert.deepEqual(place(3), { to: 'b', hit: 0 });
  // A higher threshold makes 4 of 5 too little: b.
  assert.equal(place(4, { affinityThreshold: 0.9 }).to, 'b');
});

test('llm-d: stickiness is released when the sticky worker’s estimated TTFT lead passes maxTTFTPenaltyMs', () => {
  // a's lead: 20.09 ms. A 20 ms penalty releases it (token load then picks b), 21 ms does not.
  assert.equal(place(4, { maxTTFTPenaltyMs: 20 }).to, 'b');
  assert.equal(place(4, { maxTTFTPenaltyMs: 21 }).to, 'a');
  // The same lead at a fifth of the prefill rate is 100.4 ms: released at 100, kept at 101.
  assert.equal(place(4, { maxTTFTPenaltyMs: 100, peakPrefillThroughput: 15_928 / 5 }).to, 'b');
  assert.equal(place(4, { maxTTFTPenaltyMs: 101, peakPrefillThroughput: 15_928 / 5 }).to, 'a');
  // Tokens leave the count at the first token: a has no lead, so even a 1 ms penalty keeps a,
  // and its token load (64 uncached) beats b's (320) anyway.
  assert.equal(place(4, { maxTTFTPenaltyMs: 1 }, true).to, 'a');
  // 0 means always stick.
  assert.equal(place(4, { maxTTFTPenaltyMs: 0, peakPrefillThroughput: 1 }).to, 'a');
});

test('llm-d: the active-request scorer counts requests until they end; idle workers score 1', () => {
  const route = (options: PolicyOptions) => {
    const { router: r } = router(createPolicy('llm-d', { loadScorer: 'active-request', ...options }), 7);
    const [a, b, c] = [worker('a'), worker('b'), worker('c')];
    // a runs two requests, b one (past their first tokens: still active), c none.
    for (const [w, i] of [[a, 1], [a, 2], [b, 3]] as const) {
      const q = request([1], { promptText: text(i) });
      assert.ok(r.route(q, [w]).ok);
      r.firstToken(q.id);
    }
    return picked(r.route(request([1], { promptText: text(50) }), [a, b, c]));
  };
  // Scores: a (2 − 2)/2 = 0, b (2 − 1)/2 = 0.5, c idle 1 → c; with maxBusyScore 0.5 still c.
  assert.equal(route({}), 'c');
  assert.equal(route({ maxBusyScore: 0.5 }), 'c');
  // idleThreshold 1: b and c both idle (1), a 0 → b or c, never a.
  const { router: r } = router(createPolicy('llm-d', { loadScorer: 'active-request', idleThreshold: 1 }), 3);
  const [a, b, c] = [worker('a'), worker('b'), worker('c')];
  for (const [w, i] of [[a, 1], [a, 2], [b, 3]] as const) assert.ok(r.route(request([1], { promptText: text(i) }), [w]).ok);
  const seen = new Set<string>();
  for (let i = 0; i < 30; i++) {
    const q = request([1], { promptText: text(60 + i) });
    seen.add(picked(r.route(q, [a, b, c])));
    r.complete(q.id, true);
  }
  assert.deepEqual([...seen].sort(), ['b', 'c']);
});

test('llm-d: loadScorer auto takes token-load while prompts outweigh outputs, active-request once outputs do', () => {
  // a runs one request of prompt 1 (320 tokens, first token seen: 0 tokens in flight, 1 request);
  // b runs two short ones still prefilling (32 + 32 = 64 tokens in flight, 2 requests).
  // Token load for a new 320-token prompt: a 320, b 384 → a. Active requests: a 1, b 2 → a too;
  // so c, idle and with 320, breaks the tie: token-load a = c (320) → random between a and c;
  // active-request c (idle, 1) over a ((2 − 1)/2 = 0.5) → always c.
  const pickWith = (maxTokens: number, finishedOutput?: number) => {
    const seen = new Set<string>();
    for (let seed = 1; seed <= 20; seed++) {
      const { router: r } = router(createPolicy('llm-d'), seed);
      const [a, b, c] = [worker('a'), worker('b'), worker('c')];
      const long = request([1], { promptText: text(1), maxTokens });
      assert.ok(r.route(long, [a]).ok);
      r.firstToken(long.id);
      for (const s of ['x', 'y']) assert.ok(r.route(request([1], { promptText: s.repeat(128), maxTokens }), [b]).ok);
      if (finishedOutput !== undefined) {
        const done = request([1], { promptText: text(2), maxTokens });
        assert.ok(r.route(done, [c]).ok);
        r.complete(done.id, true, finishedOutput);
      }
      seen.add(picked(r.route(request([1], { promptText: text(70), maxTokens }), [a, b, c])));
    }
    return [...seen].sort().join(',');
  };
  // Prompts 320 + 32 + 32 = 384 tokens against 3 × 16 of max_tokens: prefill-bound → token load.
  assert.equal(pickWith(16), 'a,c');
  // 3 × 200 = 600 of max_tokens outweigh 384: decode-bound → active requests.
  assert.equal(pickWith(200), 'c');
  // Once a request has finished, its real output decides: 320 prompt tokens against 5,000 out.
  assert.equal(pickWith(16, 5_000), 'c');
});
