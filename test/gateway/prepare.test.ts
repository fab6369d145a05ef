import assert from 'node:assert/strict';
import { after, before, describe, it } from 'node:test';
import { setFlagsFromString } from 'node:v8';
import { runInNewContext } from 'node:vm';
import { buildRouteRequest, chargedTokens, describeSequences, preparePrompt } from '../../src/gateway/pipeline/prepare.js';
import { KvgatePolicy } from '../../src/scheduler/policies/kvgate/index.js';
import { promptLength } from '../../src/scheduler/types.js';
import type { SimWorker } from '../../src/sim/worker/server.js';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import type { Tokenizer } from '../../src/tokenizer/types.js';
import { MODEL, post, startGateway, startSims } from './helpers.js';

// gc() for the test of what a streaming request holds: its token ids collectable or not.
setFlagsFromString('--expose-gc');
const gc = runInNewContext('gc') as () => void;

/** The estimate tokenizer, counting its encode() calls. */
function countingTokenizer(): Tokenizer & { calls: number } {
  const t = {
    name: 'counting',
    calls: 0,
    encode(text: string): number[] {
      t.calls++;
      return estimateTokenizer.encode(text);
    },
    decode: (ids: ArrayLike<number>) => estimateTokenizer.decode(ids),
    count: (text: string) => estimateTokenizer.count(text),
  };
  return t;
}

const chat = { model: MODEL, messages: [{ role: 'user', content: 'Name three prime numbers.' }], max_tokens: 8 };

describe('prompt tokenization on the request path', () => {
  let sims: SimWorker[];
  before(async () => {
    sims = await startSims(2);
  });
  after(async () => {
    await Promise.all(sims.map((s) => s.close()));
  });

  for (const policy of ['round-robin', 'least-load']) {
    it(`${policy} routes without tokenizing the prompt`, async () => {
      const tok = countingTokenizer();
      const { gw, url } = await startGateway(sims.map((s) => s.url), { policy: { name: policy } } as never, { tokenizerFor: () => tok });
      try {
        for (let i = 0; i < 3; i++) assert.equal((await post(url + '/v1/chat/completions', chat)).status, 200);
        assert.equal(tok.calls, 0);
      } finally {
        await gw.close();
      }
    });
  }

  it('a policy that reads tokens tokenizes each prompt exactly once', async () => {
    const tok = countingTokenizer();
    const { gw, url } = await startGateway(sims.map((s) => s.url), { policy: { name: 'kvgate' } } as never, { tokenizerFor: () => tok });
    try {
      for (let i = 0; i < 3; i++) assert.equal((await post(url + '/v1/chat/completions', chat)).status, 200);
      assert.equal(tok.calls, 3);
    } finally {
      await gw.close();
    }
  });

  it('the prompt is hashed where it is tokenized, before the routing decision', async () => {
    const calls: string[] = [];
    const proto = KvgatePolicy.prototype;
    const { prepare, route } = proto;
    proto.prepare = function (this: KvgatePolicy, ...a: Parameters<typeof prepare>) {
      calls.push(`prepare ${a[0].id}`);
      return prepare.apply(this, a);
    };
    proto.route = function (this: KvgatePolicy, ...a: Parameters<typeof route>) {
      calls.push(`route ${a[0].id}`);
      return route.apply(this, a);
    };
    const { gw, url } = await startGateway(sims.map((s) => s.url), { policy: { name: 'kvgate' } } as never);
    try {
      for (let i = 0; i < 2; i++) assert.equal((await post(url + '/v1/chat/completions', chat)).status, 200);
      assert.equal(calls.length, 4);
      for (let i = 0; i < 4; i += 2) {
        assert.match(calls[i]!, /^prepare /);
        assert.equal(calls[i + 1], calls[i]!.replace('prepare', 'route'));
      }
    } finally {
      proto.prepare = prepare;
      proto.route = route;
      await gw.close();
    }
  });
});

describe('what the policy learns from the gateway’s answers, and what a request holds while its answer streams', () => {
  let sims: SimWorker[];
  before(async () => {
    sims = await startSims(1);
  });
  after(async () => {
    await Promise.all(sims.map((s) => s.close()));
  });

  it('a streamed answer teaches the prefill rate; one sent whole does not (its first byte is its last)', async () => {
    const { gw, url } = await startGateway(sims.map((s) => s.url), { policy: { name: 'kvgate', options: { learnMinTokens: 1 } } } as never);
    const learned = async (): Promise<boolean> => {
      const ws = (await (await fetch(url + '/admin/workers')).json()) as Array<{ kvgate: { prefillRateLearned: boolean } }>;
      return ws[0]!.kvgate.prefillRateLearned;
    };
    try {
      for (let i = 0; i < 3; i++) assert.equal((await post(url + '/v1/chat/completions', { ...chat, stream: false })).status, 200);
      assert.equal(await learned(), false);
      const s = await post(url + '/v1/chat/completions', { ...chat, stream: true });
      assert.equal(s.status, 200);
      assert.match(s.text, /\[DONE\]/);
      assert.equal(await learned(), true);
    } finally {
      await gw.close();
    }
  });

  it("the prompt's token ids are let go at the answer's first token; their count stays, and the answer's length is still learned", async () => {
    const { gw, url } = await startGateway(sims.map((s) => s.url), { policy: { name: 'kvgate' } } as never);
    try {
      let ids: WeakRef<object> | null = null;
      let count = 0;
      let late: { tokens: () => unknown; count: () => number | undefined } | null = null;
      gw.use({
        name: 'peek',
        handle(ctx) {
          const rr = ctx.routeRequest;
          const t = rr.promptTokens;
          ids = new WeakRef(t as object);
          count = t.length;
          late = { tokens: () => rr.promptTokens, count: () => rr.promptTokenCount };
          return 'continue';
        },
      });
      const long = 'Tell me about KV caches. '.repeat(400);
      const res = await fetch(url + '/v1/chat/completions', {
        method: 'POST',
        headers: { 'content-type': 'application/json' },
        body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 200, messages: [{ role: 'user', content: long }] }),
      });
      assert.equal(res.status, 200);
      const reader = res.body!.getReader();
      let text = new TextDecoder().decode((await reader.read()).value);
      // The answer streams on; the gateway no longer holds the ids.
      await new Promise((r) => setImmediate(r));
      gc();
      assert.ok(count > 1000);
      assert.equal(ids!.deref(), undefined, 'the token ids are still reachable while the answer streams');
      assert.equal(late!.count(), count);
      // Their stand-in has their length; an id read from it throws.
      const after = late!.tokens() as ArrayLike<number>;
      assert.equal(after.length, count);
      assert.throws(() => after[0], /read after its answer's first token.*promptTokenCount/);
      for (let c = await reader.read(); !c.done; c = await reader.read()) text += new TextDecoder().decode(c.value);
      assert.match(text, /\[DONE\]/);
      // onComplete learned the answer's length in the prompt's class, kept from the decision.
      const learned = (gw.router.policy as KvgatePolicy).outputLength.describe();
      assert.equal(learned.classes, 1);
      assert.equal(gw.router.openCount, 0);
    } finally {
      await gw.close();
    }
  });
});

describe('chargedTokens: what rate limits charge a request', () => {
  const req = { headers: {} } as never;
  const routed = (kind: 'chat' | 'completions' | 'embeddings' | 'passthrough', body: Record<string, unknown>) => {
    const p = preparePrompt(kind, body as never, estimateTokenizer, 16);
    const rr = buildRouteRequest('id', MODEL, body as never, req, p as never);
    describeSequences(kind, body as never, rr);
    return rr;
  };

  it('a single prompt: its tokens and n answers of max_tokens', () => {
    const body = { model: MODEL, messages: [{ role: 'user', content: 'Name three prime numbers.' }], max_tokens: 8, n: 3 };
    const rr = routed('chat', body);
    assert.equal(chargedTokens('chat', rr, 8), promptLength(rr) + 3 * 8);
  });

  it('a batch of prompts: every prompt and every answer, not the first alone', () => {
    const text = 'the quick brown fox jumps over the lazy dog '.repeat(5);
    const body = { model: MODEL, prompt: [text, text, text, text], max_tokens: 10, n: 2 };
    const rr = routed('completions', body);
    const one = promptLength(rr);
    assert.equal(chargedTokens('completions', rr, 10), 4 * one + 4 * 2 * 10);
    const ids = { model: MODEL, prompt: [[1, 2, 3], [4, 5, 6, 7, 8]], max_tokens: 4 };
    assert.equal(chargedTokens('completions', routed('completions', ids), 4), 3 + 5 + 2 * 4);
  });

  it('marks the sequences a request starts and its batch prompt tokens; a single answer is left unmarked', () => {
    const one = routed('chat', { model: MODEL, messages: [{ role: 'user', content: 'hi' }] });
    assert.equal(one.sequences, undefined);
    assert.equal(one.batchPromptTokens, undefined);
    const n = routed('chat', { model: MODEL, messages: [{ role: 'user', content: 'hi' }], n: 5 });
    assert.equal(n.sequences, 5);
    assert.equal(n.batchPromptTokens, undefined);
    const batch = routed('completions', { model: MODEL, prompt: [[1, 2, 3], [4, 5, 6, 7, 8], [9]], n: 2 });
    assert.equal(batch.sequences, 6);
    assert.equal(batch.batchPromptTokens, 9);
    const emb = routed('embeddings', { model: MODEL, input: ['a', 'b', 'c', 'd'] });
    assert.equal(emb.sequences, 4);
    assert.equal(routed('passthrough', { model: MODEL, prompt: 'x', n: 3 }).sequences, undefined);
  });

  it('embeddings: every input, no answer tokens; other endpoints: the prompt routed on', () => {
    const body = { model: MODEL, input: Array.from({ length: 50 }, () => 'a sentence of about ten tokens to embed here') };
    const rr = routed('embeddings', body);
    assert.equal(chargedTokens('embeddings', rr, 1), 50 * promptLength(rr));
    const ids = { model: MODEL, input: [[1, 2], [3, 4, 5]] };
    assert.equal(chargedTokens('embeddings', routed('embeddings', ids), 1), 5);
    const tok = { model: MODEL, prompt: 'count these words please' };
    const trr = routed('passthrough', tok);
    assert.equal(chargedTokens('passthrough', trr, 1), promptLength(trr));
  });
});
