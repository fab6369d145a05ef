/** ChatTokenCache: message by message, cached or not, the ids are those of the whole rendered prompt. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { renderChat, renderMessage, type ChatMessageLike } from '../../src/tokenizer/chat-template.js';
import { leadingPartOf } from '../../src/kv/leading-part.js';
import { ChatTokenCache } from '../../src/tokenizer/chat-tokens.js';
import { estimateTokenizer } from '../../src/tokenizer/estimate.js';
import { VOCAB } from '../../src/tokenizer/vocabulary.js';
import { seededRng } from '../../src/util/rng.js';

/** Text that ends and begins every way a boundary could be crossed: spaces, digits, newlines, '<'. */
function randomContent(rand: () => number, length: number): string {
  const alphabet = ['a', 'Zq', ' ', '  ', '0', '42', '.', ',', '\n', ' \n', '<', '|>', 'é', '😀', 'hello', ' world', '123456', '\t', ' <|user|>'];
  for (let i = 0; i < VOCAB.length; i += 97) alphabet.push(VOCAB[i]!);
  let s = '';
  while (s.length < length) s += alphabet[Math.floor(rand() * alphabet.length)];
  return s;
}

function randomConversation(rand: () => number): ChatMessageLike[] {
  const roles = ['system', 'user', 'assistant', 'tool'];
  return Array.from({ length: 1 + Math.floor(rand() * 6) }, () => {
    const long = rand() < 0.5;
    const text = randomContent(rand, long ? 300 + Math.floor(rand() * 700) : Math.floor(rand() * 40));
    const content = rand() < 0.2 ? [{ type: 'text', text }, { type: 'image_url', image_url: { url: 'x' } }, { type: 'text', text: ' more' }] : text;
    return { role: roles[Math.floor(rand() * roles.length)]!, content };
  });
}

test('the ids are those of the rendered prompt, on a miss and on a hit, with and without the generation prompt', () => {
  const rand = seededRng(11);
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256 });
  for (let i = 0; i < 400; i++) {
    const msgs = randomConversation(rand);
    const gen = rand() < 0.8;
    const want = estimateTokenizer.encode(renderChat(msgs, gen));
    assert.deepEqual(Array.from(cache.encode(msgs, gen)), want, JSON.stringify(msgs).slice(0, 200));
    assert.deepEqual(Array.from(cache.encode(msgs, gen)), want);
  }
  assert.ok(cache.hits > 100 && cache.misses > 100, `hits ${cache.hits}, misses ${cache.misses}`);
});

test('a conversation that grows turn by turn tokenizes only its new messages', () => {
  const rand = seededRng(5);
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256 });
  const msgs: ChatMessageLike[] = [{ role: 'system', content: randomContent(rand, 2000) }];
  for (let turn = 0; turn < 10; turn++) {
    msgs.push({ role: turn % 2 ? 'assistant' : 'user', content: randomContent(rand, 600) });
    const before = cache.misses;
    assert.deepEqual(Array.from(cache.encode(msgs)), estimateTokenizer.encode(renderChat(msgs)));
    // The first turn also tokenizes the system message.
    assert.equal(cache.misses - before, turn === 0 ? 2 : 1, `turn ${turn}: only the new messages`);
  }
  // The caller may change what it got: the cache's own ids are not handed out.
  const ids = cache.encode(msgs);
  ids.fill(0);
  assert.deepEqual(Array.from(cache.encode(msgs)), estimateTokenizer.encode(renderChat(msgs)));
});

/** `n` messages of 1,000 characters alike but at index 1, which the cache's sample of a text of that length skips. */
function sameSample(n: number): ChatMessageLike[] {
  const base = randomContent(seededRng(9), 1000).slice(0, 1000);
  return Array.from({ length: n }, (_, i) => ({ role: 'user', content: `${base[0]}${String.fromCharCode(0x41 + i)}${base.slice(2)}` }));
}

test('messages that differ only where the cache does not sample are told apart, at most four of them kept', () => {
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256 });
  const msgs = sameSample(6);
  const want = msgs.map((m) => estimateTokenizer.encode(renderChat([m], false)));
  for (let round = 0; round < 3; round++) {
    for (let i = 0; i < msgs.length; i++) assert.deepEqual(Array.from(cache.encode([msgs[i]!], false)), want[i], `round ${round}, message ${i}`);
  }
  // Six share a sample: the four kept last stay, so each round ends with the last four kept.
  assert.equal(cache.size, want.slice(2).reduce((n, w) => n + w.length, 0));
  const misses = cache.misses;
  for (let i = 2; i < 6; i++) cache.encode([msgs[i]!], false);
  assert.equal(cache.misses, misses, 'the four kept last are hits');
  cache.encode([msgs[0]!], false);
  assert.equal(cache.misses, misses + 1, 'an earlier one was dropped');
});

test('dropping the least recently used message out of a chain of messages with one sample keeps the others', () => {
  const msgs = sameSample(3);
  const sizes = msgs.map((m) => estimateTokenizer.encode(renderChat([m], false)).length);
  // One plain LRU list (protectedShare 0): the order of the chain's drops is the LRU's.
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: sizes[0]! + sizes[1]! + sizes[2]! - 1, minChars: 256, protectedShare: 0 });
  cache.encode([msgs[0]!], false);
  cache.encode([msgs[1]!], false);
  cache.encode([msgs[2]!], false);
  cache.encode([msgs[1]!], false);
  // Three do not fit: msgs[0], least recently used and last in its chain, went.
  const misses = cache.misses;
  cache.encode([msgs[2]!], false);
  cache.encode([msgs[1]!], false);
  assert.equal(cache.misses, misses);
  // Now msgs[0] comes back and msgs[2], in the middle of the chain, is the one to go.
  assert.deepEqual(Array.from(cache.encode([msgs[0]!], false)), estimateTokenizer.encode(renderChat([msgs[0]!], false)));
  assert.equal(cache.misses, misses + 1);
  for (const i of [1, 0]) cache.encode([msgs[i]!], false);
  assert.equal(cache.misses, misses + 1, 'msgs[1] and msgs[0] are kept');
  assert.deepEqual(Array.from(cache.encode([msgs[2]!], false)), estimateTokenizer.encode(renderChat([msgs[2]!], false)));
  assert.equal(cache.misses, misses + 2, 'msgs[2] was dropped');
  assert.ok(cache.size <= sizes[0]! + sizes[1]! + sizes[2]! - 1);
});

test('at most maxTokens ids are kept, the least recently used dropped first', () => {
  const rand = seededRng(3);
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 800, minChars: 256 });
  const docs = Array.from({ length: 6 }, () => ({ role: 'user', content: randomContent(rand, 1500) }));
  const sizes = docs.map((d) => estimateTokenizer.encode(renderChat([d], false)).length);
  // Two fit in 800, three do not.
  assert.ok(sizes.every((n) => n > 300 && n < 400), `sizes ${sizes}`);
  cache.encode([docs[0]!], false);
  cache.encode([docs[1]!], false);
  cache.encode([docs[0]!], false); // docs[0] is now the most recent
  cache.encode([docs[2]!], false); // over 800: docs[1] goes
  assert.ok(cache.size <= 800, `kept ${cache.size}`);
  const misses = cache.misses;
  cache.encode([docs[0]!], false);
  assert.equal(cache.misses, misses, 'the recently used one stayed');
  cache.encode([docs[1]!], false);
  assert.equal(cache.misses, misses + 1, 'the least recently used one was dropped');
  for (const d of docs) cache.encode([d], false);
  assert.ok(cache.size <= 800 && cache.size > 0, `kept ${cache.size}`);
});

test('messages sent once do not push out a message sent again: they turn over probation only', () => {
  const rand = seededRng(9);
  const system = { role: 'system', content: randomContent(rand, 1500) };
  const once = Array.from({ length: 20 }, () => ({ role: 'user', content: randomContent(rand, 1500) }));
  const size = estimateTokenizer.encode(renderChat([system], false)).length;
  for (const share of [0.8, 0]) {
    // Room for about five messages; the twenty sent once are four times that.
    const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 5 * size, minChars: 256, protectedShare: share });
    cache.encode([system], false);
    cache.encode([system], false); // sent again: protected
    for (const m of once) cache.encode([m], false);
    assert.ok(cache.size <= 5 * size, `kept ${cache.size}`);
    const misses = cache.misses;
    assert.deepEqual(Array.from(cache.encode([system], false)), estimateTokenizer.encode(renderChat([system], false)));
    if (share > 0) assert.equal(cache.misses, misses, 'the system message stayed');
    else assert.equal(cache.misses, misses + 1, 'one plain LRU list lets the flood push it out');
  }
});

test('the protected segment holds at most its share; its least recent goes back to probation, not out', () => {
  const rand = seededRng(10);
  const docs = Array.from({ length: 3 }, () => ({ role: 'user', content: randomContent(rand, 1500) }));
  const sizes = docs.map((d) => estimateTokenizer.encode(renderChat([d], false)).length);
  // All three fit; the protected half holds one of them.
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: sizes[0]! + sizes[1]! + sizes[2]!, minChars: 256, protectedShare: 0.5 });
  for (const d of [docs[0]!, docs[0]!, docs[1]!, docs[1]!]) cache.encode([d], false); // docs[0] protected, then demoted by docs[1]
  cache.encode([docs[2]!], false); // fits beside them: nothing dropped
  const misses = cache.misses;
  for (const d of docs) cache.encode([d], false);
  assert.equal(cache.misses, misses, 'the demoted message was kept on probation');
  // Now over the bound by one message: probation's least recent goes first, not the protected one.
  cache.resize(sizes[0]! + sizes[1]! + sizes[2]! - 1);
  cache.encode([docs[2]!], false); // the protected one (sent again last) stays
  assert.equal(cache.misses, misses);
  assert.ok(cache.size < sizes[0]! + sizes[1]! + sizes[2]!);
});

test('resize: a smaller bound drops the least recently used at once; 0 keeps nothing, with the same ids', () => {
  const rand = seededRng(4);
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256 });
  const docs = Array.from({ length: 4 }, () => ({ role: 'user', content: randomContent(rand, 1500) }));
  for (const d of docs) cache.encode([d], false);
  cache.encode([docs[0]!], false); // the most recent
  const all = cache.size;
  const first = estimateTokenizer.encode(renderChat([docs[0]!], false)).length;
  cache.resize(first);
  assert.equal(cache.size, first, `kept ${cache.size} of ${all}: only the most recent fits`);
  const misses = cache.misses;
  cache.encode([docs[0]!], false);
  assert.equal(cache.misses, misses, 'the most recent was kept');
  cache.resize(0);
  assert.equal(cache.size, 0);
  assert.deepEqual(Array.from(cache.encode([docs[1]!, docs[0]!])), estimateTokenizer.encode(renderChat([docs[1]!, docs[0]!])));
  assert.equal(cache.size, 0, 'nothing kept');
});

test('with a scope (a tenant where the pool isolates tenants) messages are kept per scope', () => {
  const rand = seededRng(9);
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256 });
  const msgs: ChatMessageLike[] = [{ role: 'system', content: randomContent(rand, 1200) }];
  const want = estimateTokenizer.encode(renderChat(msgs));
  assert.deepEqual(Array.from(cache.encode(msgs, true, 'tenant-a')), want);
  assert.equal(cache.misses, 1);
  assert.deepEqual(Array.from(cache.encode(msgs, true, 'tenant-b')), want);
  assert.equal(cache.misses, 2, "tenant-b does not hit tenant-a's entry");
  assert.deepEqual(Array.from(cache.encode(msgs, true, 'tenant-a')), want);
  assert.equal(cache.hits, 1);
  assert.deepEqual(Array.from(cache.encode(msgs)), want);
  assert.equal(cache.misses, 3, 'nor does the unscoped caller');
});

test('shareKept gives a kept message its kept text, by scope and role, without counting a hit or refreshing it', () => {
  const rand = seededRng(13);
  const [system, doc, third] = [0, 1, 2].map(() => randomContent(rand, 1200)) as [string, string, string];
  const idsOf = (role: string, content: string) => estimateTokenizer.encode(renderMessage({ role, content })).length;
  // Room for the three messages but one id: keeping the third drops the least recently used.
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: idsOf('system', system) + idsOf('user', doc) + idsOf('user', third) - 1, minChars: 256 });
  cache.encode([{ role: 'system', content: system }], true, 'tenant-a');
  cache.encode([{ role: 'user', content: doc }], true, 'tenant-a');
  // The request's own copies of the same texts (a JSON parser's), and messages the cache does not keep.
  const copy = (t: string) => t.split('').join('');
  const msgs: ChatMessageLike[] = [
    { role: 'system', content: copy(system) },
    { role: 'user', content: copy(doc) },
    { role: 'assistant', content: copy(doc) },
    { role: 'user', content: 'short' },
    { role: 'user', content: [{ type: 'text', text: copy(doc) }] },
  ];
  const before = JSON.stringify(msgs);
  const counts = () => [cache.hits, cache.misses];
  const was = counts();
  assert.equal(cache.shareKept(msgs, 'tenant-b'), 0, 'another scope');
  assert.equal(cache.shareKept(msgs), 0, 'no scope');
  assert.equal(cache.shareKept(msgs, 'tenant-a'), 2, 'the system message and the user document, not the same text under another role');
  assert.equal(JSON.stringify(msgs), before);
  assert.deepEqual(counts(), was);
  // Not refreshed: the system message, kept first, is still the first dropped.
  cache.encode([{ role: 'user', content: third }], true, 'tenant-a');
  assert.equal(cache.shareKept([{ role: 'system', content: copy(system) }, { role: 'user', content: copy(doc) }], 'tenant-a'), 1);
  assert.equal(cache.shareKept([{ role: 'system', content: copy(system) }], 'tenant-a'), 0);
});

test('a prompt that begins with a kept message sent again is recorded as beginning with it; not on its first request, nor when it begins with a short message', () => {
  const rand = seededRng(21);
  const cache = new ChatTokenCache(estimateTokenizer, { maxTokens: 1 << 20, minChars: 256 });
  const system: ChatMessageLike = { role: 'system', content: randomContent(rand, 2000) };
  const systemIds = estimateTokenizer.encode(renderChat([system], false));
  for (const miss of [true, false]) {
    const msgs = [system, { role: 'user', content: randomContent(rand, 100) }];
    const before = cache.misses;
    const ids = cache.encode(msgs);
    assert.equal(cache.misses - before, miss ? 1 : 0, miss ? 'the system message is tokenized' : 'the system message is kept');
    assert.deepEqual(Array.from(ids.subarray(0, systemIds.length)), systemIds);
    const part = leadingPartOf(ids);
    if (miss) {
      // Its first request: a part would hold the kept ids as long as this prompt lives.
      assert.equal(part, undefined, 'not recorded on the first request');
      continue;
    }
    assert.ok(part !== undefined, 'recorded on a hit');
    assert.deepEqual(Array.from(part.tokens), systemIds);
  }
  // Both prompts share one part: its block hashes are computed once.
  assert.equal(leadingPartOf(cache.encode([system])), leadingPartOf(cache.encode([system, { role: 'user', content: 'hi' }])));
  assert.equal(leadingPartOf(cache.encode([{ role: 'user', content: 'hi' }, system])), undefined);
});
