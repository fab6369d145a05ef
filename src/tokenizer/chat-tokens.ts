/**
 * A chat prompt's token ids, message by message, with the ids of long messages kept for the next
 * request that sends them again.
 *
 * A conversation resends its whole history with every turn, and a RAG or agent prompt repeats its
 * long system message and documents across requests, so the gateway tokenized the same text over
 * and over: for an 8,000-token prompt that was the largest share of its CPU time per request
 * (docs/performance.md, "Tokenizing long prompts"). Here each message is tokenized on its own and
 * a message of `minChars` or more is remembered (at most `maxTokens` ids in all), so a turn costs
 * the tokenizing of what is new in it.
 *
 * What is kept is a segmented LRU, as Caffeine's main space is: a message is kept first on
 * probation; sent again, it moves to the protected segment, which holds up to `protectedShare` of
 * the ids (80% by default, Caffeine's split), its least recent going back to probation when it is
 * full. Room is made from probation first. A stream of long messages each sent once (pasted
 * documents, long questions) then turns over only the probation segment, and the messages that
 * come back (system prompts, documents asked about again, a conversation's history) stay.
 *
 * Exact only for the `estimate` tokenizer and the shared template (chat-template.ts): every
 * rendered message ends with a newline and the next begins with '<', and no estimate piece spans
 * such a boundary (a piece is a run of letters or digits or one other character, with at most one
 * space before it), so the ids of the messages one after the other are the ids of the whole text.
 * test/tokenizer/chat-tokens.test.ts checks that on random conversations. A real model's
 * tokenizer (hf:) merges across such boundaries by its own rules and is not given this cache.
 * Where a pool isolates tenants, messages are kept per tenant (`scope`).
 */
import { LeadingPart, recordLeadingPart } from '../kv/leading-part.js';
import { GENERATION_PROMPT, renderMessage, type ChatMessageLike } from './chat-template.js';
import type { Tokenizer } from './types.js';
import { InsertionFront } from '../util/insertion-front.js';

/** Ids kept by default (`tokenizers.keptIds`): 4 MB of Int32Array, plus the messages' text and the block hashes of those that begin prompts. */
export const DEFAULT_KEPT_IDS = 1 << 20;

export interface ChatTokenCacheOptions {
  /** Ids kept in all, at most (4 bytes each, in an Int32Array outside the JS heap). */
  maxTokens: number;
  /** Messages shorter than this (rendered) are tokenized every time: not worth a lookup. */
  minChars: number;
  /**
   * Share of `maxTokens` for messages sent more than once (the protected segment); default 0.8.
   * 0 keeps one plain LRU list.
   */
  protectedShare?: number;
}

/** The protected segment's default share of the kept ids (Caffeine's segmented LRU: 80%). */
const DEFAULT_PROTECTED_SHARE = 0.8;

/** A message's kept ids, in the group of messages with its scope and role. */
interface Kept {
  ids: Int32Array;
  /** The ids as a prompt's leading part, made when a prompt first begins with this message sent again. */
  part: LeadingPart | null;
  /** Requests that sent this message since the one it was kept from. */
  seen: number;
  /** In the protected segment (sent again since it was kept), else on probation. */
  protected: boolean;
  group: Map<number, Kept>;
  groupKey: string;
  /** The message's content, or its rendered text when the content is not a string. */
  key: string;
  /** sampleKey(key): where the group files it. */
  sample: number;
  /** The next kept message of the group with the same sample, kept earlier. */
  next: Kept | null;
}

/** Characters sampleKey reads, spread over the text, besides its last ones. */
const SAMPLED_CHARS = 64;
/** Kept messages of one group that share a sample, at most: a text crafted to collide with others is looked up among this many. */
const MAX_SAME_SAMPLE = 4;

/**
 * A message's text reduced to a number: its length, SAMPLED_CHARS characters spread over it and
 * its last 16. V8 hashes a string of up to 16,383 characters whole the first time it is a Map
 * key (about 5 µs for the 4 KB system prompt of a 1,000-token request), and a request's message
 * is a new string each time. Messages with the same sample are told apart by comparing their
 * text.
 */
function sampleKey(s: string): number {
  const n = s.length;
  let h = Math.imul(n ^ 0x9e3779b9, 0x85ebca6b);
  const step = Math.max(1, Math.floor(n / SAMPLED_CHARS));
  for (let i = 0; i < n; i += step) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  for (let i = Math.max(0, n - 16); i < n; i++) h = Math.imul(h ^ s.charCodeAt(i), 0x01000193);
  return h >>> 0;
}

/** The group of kept messages of a scope and role (`role` null: messages found by their rendered text). */
function groupKeyOf(scope: string | undefined, role: string | null): string {
  return `${scope === undefined ? '-' : `+${scope}`}\u0000${role !== null ? `r${role}` : 't'}`;
}

/** The kept message of `group` whose key is `key` (its sampleKey `sample`), if any. */
function keptIn(group: Map<number, Kept> | undefined, key: string, sample: number): Kept | undefined {
  let hit = group?.get(sample);
  while (hit !== undefined && hit.key !== key) hit = hit.next ?? undefined;
  return hit;
}

export class ChatTokenCache {
  /**
   * Kept messages by scope and role, then by the sample of their text (sampleKey), those with the
   * same sample chained. A message whose content is a string is found by that string as the
   * request's JSON parser made it, not by its rendered text: rendering a long message anew costs
   * more than the rest of a kept message's lookup. Other messages are found by their rendered
   * text.
   */
  private readonly groups = new Map<string, Map<number, Kept>>();
  /** Kept messages on probation, least recently used first (a Set keeps insertion order). */
  private readonly probation = new Set<Kept>();
  private readonly probationFront = new InsertionFront(this.probation);
  /** Kept messages sent again since they were kept, least recently used first. */
  private readonly protectedSet = new Set<Kept>();
  private readonly protectedFront = new InsertionFront(this.protectedSet);
  private kept = 0;
  /** Ids in the protected segment. */
  private protectedIds = 0;
  private generation: number[] | null = null;
  hits = 0;
  misses = 0;

  constructor(
    private readonly tokenizer: Tokenizer,
    private readonly o: ChatTokenCacheOptions,
  ) {}

  /**
   * The ids of renderChat(messages, addGenerationPrompt) under the tokenizer, a new array. With a
   * `scope` (a tenant's cache salt where the pool isolates tenants) messages are kept per scope:
   * a hit is faster than a miss, and one tenant must not learn from the timing which long
   * messages another has sent.
   */
  encode(messages: readonly ChatMessageLike[], addGenerationPrompt = true, scope?: string): Int32Array {
    const parts: ArrayLike<number>[] = [];
    let first: Kept | null = null;
    for (const m of messages) {
      const kept = this.message(m, scope, parts);
      if (parts.length === 1) first = kept;
    }
    if (addGenerationPrompt) parts.push((this.generation ??= this.tokenizer.encode(GENERATION_PROMPT)));
    let n = 0;
    for (const ids of parts) n += ids.length;
    // A typed array: its ids live outside the JS heap, so a request that is still in flight when
    // the young generation is collected does not have them copied (a number[] of 1,000 ids is
    // 8 KB the collector moves, and then promotes, for every such request).
    const out = new Int32Array(n);
    let at = 0;
    for (const ids of parts) {
      out.set(ids, at);
      at += ids.length;
    }
    // A prompt that begins with a message sent before (a system prompt, a document) has that
    // message's block hashes computed once for all the prompts that begin with it
    // (kv/prompt-blocks.ts). Not on the message's first request: many long messages are sent only
    // once (a pasted document, a long question), and the part, recorded for the prompt, would keep
    // the kept copy of its ids alive as long as the request, after the cache has dropped them.
    if (first !== null && first.seen > 0) recordLeadingPart(out, (first.part ??= new LeadingPart(first.ids)));
    return out;
  }

  /** Ids kept now. */
  get size(): number {
    return this.kept;
  }

  /** Keep at most `maxTokens` ids from now on (0: none), dropping the least recently used now. */
  resize(maxTokens: number): void {
    this.o.maxTokens = maxTokens;
    this.demoteOverBudget();
    this.evict();
  }

  /**
   * Give each message whose content is a kept string that string as its content: the same text,
   * held once for every request that sends it. A request's own copy (its JSON parser's) is then
   * garbage at once, where the request and its rendered prompt would otherwise hold it until the
   * request ends: at saturation that outlives young-generation collections, which would copy and
   * promote every request's long messages. Read-only for the cache (no hit is counted, nothing
   * moves in the LRU order): encode() does that. Returns how many messages it gave a kept string.
   */
  shareKept(messages: readonly ChatMessageLike[], scope?: string): number {
    let shared = 0;
    for (const m of messages) {
      if (typeof m.content !== 'string' || typeof m.role !== 'string' || m.role.length + m.content.length + 6 < this.o.minChars) continue;
      const kept = keptIn(this.groups.get(groupKeyOf(scope, m.role)), m.content, sampleKey(m.content));
      if (kept === undefined) continue;
      (m as { content: string }).content = kept.key;
      shared++;
    }
    return shared;
  }

  /**
   * Append message `m`'s ids to `parts`. Returns the kept entry they came from or went into, null
   * when the message is too short to keep or too long to fit.
   */
  private message(m: ChatMessageLike, scope: string | undefined, parts: ArrayLike<number>[]): Kept | null {
    const content = typeof m.content === 'string' && typeof m.role === 'string' ? m.content : null;
    // renderMessage's length for a string content: `<|role|>\n` + content + `\n`.
    const rendered = content === null ? renderMessage(m) : null;
    const length = rendered !== null ? rendered.length : m.role.length + content!.length + 6;
    if (length < this.o.minChars) {
      parts.push(this.tokenizer.encode(rendered ?? renderMessage(m)));
      return null;
    }
    const groupKey = groupKeyOf(scope, content !== null ? m.role : null);
    const key = content ?? rendered!;
    const sample = sampleKey(key);
    let group = this.groups.get(groupKey);
    const hit = keptIn(group, key, sample);
    if (hit !== undefined) {
      this.hits++;
      hit.seen++;
      this.touch(hit);
      parts.push(hit.ids);
      return hit;
    }
    this.misses++;
    const ids = this.tokenizer.encode(rendered ?? renderMessage(m));
    parts.push(ids);
    if (ids.length > this.o.maxTokens) return null;
    if (group === undefined) this.groups.set(groupKey, (group = new Map()));
    const kept: Kept = { ids: Int32Array.from(ids), part: null, seen: 0, protected: false, group, groupKey, key, sample, next: group.get(sample) ?? null };
    group.set(sample, kept);
    this.probation.add(kept);
    this.kept += ids.length;
    // Past MAX_SAME_SAMPLE messages with this sample, the one kept earliest goes.
    let last = kept;
    for (let n = 1; last.next !== null; n++) {
      if (n === MAX_SAME_SAMPLE) {
        this.drop(last.next);
        break;
      }
      last = last.next;
    }
    this.evict();
    return kept;
  }

  /** Ids the protected segment may hold. */
  private get protectedBudget(): number {
    return this.o.maxTokens * (this.o.protectedShare ?? DEFAULT_PROTECTED_SHARE);
  }

  /** A kept message sent again: to the protected segment's most recent end (probation's, if it cannot fit there). */
  private touch(k: Kept): void {
    if (k.protected) {
      this.protectedSet.delete(k);
      this.protectedSet.add(k);
      return;
    }
    this.probation.delete(k);
    if (k.ids.length > this.protectedBudget) {
      this.probation.add(k);
      return;
    }
    k.protected = true;
    this.protectedSet.add(k);
    this.protectedIds += k.ids.length;
    this.demoteOverBudget();
  }

  /** Move the protected segment's least recent messages back to probation until it fits its share. */
  private demoteOverBudget(): void {
    while (this.protectedIds > this.protectedBudget) {
      const oldest = this.protectedFront.shift();
      if (oldest === undefined) break;
      const k = oldest[0];
      k.protected = false;
      this.protectedIds -= k.ids.length;
      this.probation.add(k);
    }
  }

  /** Drop messages until at most maxTokens ids are kept: probation's least recent first, then the protected segment's. */
  private evict(): void {
    while (this.kept > this.o.maxTokens) {
      const oldest = this.probationFront.shift() ?? this.protectedFront.shift();
      if (oldest === undefined) break;
      this.drop(oldest[0]);
    }
  }

  /** Forget kept message `k`. */
  private drop(k: Kept): void {
    if (k.protected) {
      this.protectedSet.delete(k);
      this.protectedIds -= k.ids.length;
      k.protected = false;
    } else this.probation.delete(k);
    const head = k.group.get(k.sample)!;
    if (head === k) {
      if (k.next !== null) k.group.set(k.sample, k.next);
      else k.group.delete(k.sample);
    } else {
      let p = head;
      while (p.next !== k) p = p.next!;
      p.next = k.next;
    }
    k.next = null;
    if (k.group.size === 0) this.groups.delete(k.groupKey);
    this.kept -= k.ids.length;
  }
}
