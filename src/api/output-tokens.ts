/**
 * The length of a relayed answer in tokens, read off the bytes as they pass (for the routing
 * policy, which learns how long answers run: scheduler/policies/kvgate/learners/output-length.ts). Nothing is parsed or
 * copied per chunk; the relay keeps references to the last two chunks and counts event ends.
 *
 * - A response carrying `usage` (every JSON answer; a stream with
 *   `stream_options.include_usage` or vLLM's `continuous_usage_stats`) says it exactly: the last
 *   `"completion_tokens":` in its final bytes.
 * - Otherwise a stream is counted by its events: vLLM sends one per generated token, plus a
 *   chat stream's first for each of its `n` answers (the assistant role, no token), and
 *   `data: [DONE]`. A stream whose stop string held text back sends it in one event later, so
 *   that count is a floor, close enough for a mean.
 * - A Responses API answer (`/v1/responses`) says it in its `usage` as `"output_tokens":`: at the
 *   end of a JSON answer, and in a stream's last event (`response.completed`). Its other events
 *   are not one per token, so nothing is counted without it.
 */

const USAGE_KEY = Buffer.from('"completion_tokens":');
const RESPONSES_USAGE_KEY = Buffer.from('"output_tokens":');
const PROMPT_USAGE_KEY = Buffer.from('"prompt_tokens":');
const RESPONSES_PROMPT_USAGE_KEY = Buffer.from('"input_tokens":');
/** `prompt_tokens_details` (a Responses answer's `input_tokens_details`) with vLLM's --enable-prompt-tokens-details. */
const CACHED_USAGE_KEY = Buffer.from('"cached_tokens":');
const DONE_MARK = Buffer.from('data: [DONE]\n\n');
const LF = 0x0a;
/** How far from the end of the body `usage` is looked for (vLLM's trails it by ~100 bytes). */
const USAGE_WINDOW = 512;

export class OutputTokenCounter {
  private events = 0;
  private prev: Buffer | null = null;
  private last: Buffer | null = null;

  /**
   * A body chunk about to be relayed. `tail`: the last two bytes relayed before it (api/sse.ts
   * updateTail), so an event end split across two chunks is counted once.
   */
  chunk(chunk: Buffer, stream: boolean, tail: number): void {
    this.prev = this.last;
    this.last = chunk;
    if (!stream || chunk.length === 0) return;
    // "\n" | "\n…": the previous chunk ended in a lone newline and this one completes the pair.
    if ((tail & 0xff) === LF && (tail >> 8) !== LF && chunk[0] === LF) this.events++;
    let i = chunk.indexOf('\n\n');
    while (i !== -1) {
      this.events++;
      i = chunk.indexOf('\n\n', i + 2);
    }
  }

  /** Stream events counted so far (about one per generated token). */
  get eventCount(): number {
    return this.events;
  }

  /**
   * Output tokens of the whole answer (all choices), or undefined when nothing says. `choices`:
   * the answers a chat stream carries (its `n`), each opened by a role event.
   */
  total(kind: 'chat' | 'completions' | 'responses', stream: boolean, choices = 1): number | undefined {
    const tail = this.tailWindow();
    if (tail === null) return undefined;
    if (kind === 'responses') return usageTokens(tail, RESPONSES_USAGE_KEY);
    const usage = usageTokens(tail, USAGE_KEY);
    if (usage !== undefined || !stream) return usage;
    let n = this.events;
    if (kind === 'chat') n -= choices;
    if (tail.lastIndexOf(DONE_MARK) !== -1) n--;
    return n >= 0 ? n : undefined;
  }

  /**
   * Prompt tokens of the whole request as the answer's `usage` says (`prompt_tokens`; a Responses
   * answer's `input_tokens`), or undefined when the answer carries no usage (a stream that did not
   * ask for it).
   */
  promptTotal(kind: 'chat' | 'completions' | 'responses' | 'embeddings'): number | undefined {
    const tail = this.tailWindow();
    if (tail === null) return undefined;
    return usageTokens(tail, kind === 'responses' ? RESPONSES_PROMPT_USAGE_KEY : PROMPT_USAGE_KEY);
  }

  /**
   * Prompt tokens the worker served from its prefix cache, as the usage's `cached_tokens` says
   * (vLLM reports it with --enable-prompt-tokens-details), or undefined when it does not.
   */
  cachedPromptTotal(): number | undefined {
    const tail = this.tailWindow();
    return tail === null ? undefined : usageTokens(tail, CACHED_USAGE_KEY);
  }

  /** The body's last bytes: the last chunk, with the end of the one before when it is short. */
  private tailWindow(): Buffer | null {
    const last = this.last;
    if (last === null || this.prev === null || last.length >= USAGE_WINDOW) return last;
    return Buffer.concat([this.prev.subarray(Math.max(0, this.prev.length - USAGE_WINDOW)), last]);
  }
}

/** The number after the last `key` (`"completion_tokens":`) within USAGE_WINDOW of the end of `tail`. */
function usageTokens(tail: Buffer, key: Buffer): number | undefined {
  const at = tail.lastIndexOf(key);
  if (at === -1 || tail.length - at > USAGE_WINDOW) return undefined;
  let i = at + key.length;
  while (tail[i] === 0x20) i++;
  let n = 0;
  let digits = 0;
  for (; i < tail.length && tail[i]! >= 0x30 && tail[i]! <= 0x39; i++, digits++) n = n * 10 + tail[i]! - 0x30;
  return digits > 0 ? n : undefined;
}
