/**
 * Learner `output-length`: how long a request's answer is expected to be, learned from the
 * answers of earlier requests (hook: onComplete, with the answer's length as the relay counted it).
 *
 * Most clients send a fixed max_tokens (or none, when the gateway assumes one), and the answer
 * ends at its EOS long before it: max_tokens alone says nothing about whether a request will
 * decode for 5 tokens or 500, which is what decode-aware placement weighs. So the model learns,
 * per prompt class, the share of max_tokens that answers actually use, and expects
 *
 *   expected(req) = clamp(ratio(class) · max_tokens, 1, max_tokens)
 *
 * A class is the prompt's first CLASS_BLOCKS blocks (their chained hash): requests built on the
 * same system prompt, few-shot template or tool specification share it, and an application's
 * answers are alike in length (a classifier's few tokens, a summariser's hundreds). Prompts seen
 * for the first time learn and use a ratio of their own (`unseen`): they are the unique documents
 * and one-off prompts, whose answers differ from those of the templated traffic beside them.
 *
 * Where max_tokens is the answer's exact length (the simulation without --declared-max-tokens,
 * or a client that knows), answers end at it, every ratio stays 1 and nothing changes. Until a
 * class has an answer, and before anything is learned, the ratio is 1 (max_tokens as declared).
 */
import { promptBlocks } from '../../../../kv/prompt-blocks.js';
import type { RouteRequest } from '../../../types.js';
import { OrderedMap53 } from '../../../../util/ordered-map53.js';
import { stateKey } from '../../../../util/state.js';

/** Leading blocks that name a prompt's class (64 tokens at vLLM's default block size of 16). */
const CLASS_BLOCKS = 4;
/** Block size of the class hash: independent of the workers', so a class is a class everywhere. */
const CLASS_BLOCK_SIZE = 16;

interface Learned {
  ratio: number;
  answers: number;
}

/**
 * A class's answers are counted up to this (the count is its entry's 8-bit tag): past 1/alpha
 * answers the count no longer changes a new answer's weight, so the cap is exact for alpha ≥ 1/255.
 */
const MAX_COUNTED = 255;

export interface OutputLengthOptions {
  /** Weight of a new answer in a class's ratio (after the first few, which average evenly); at least 1/255. */
  alpha: number;
  /** Classes remembered (least recently used forgotten first). */
  maxClasses: number;
}

export class OutputLengthLearner {
  /**
   * Each class's ratio by its hash, tagged with its answers so far (at most MAX_COUNTED), least
   * recently used first. A Map keyed by the hashes (past the small-integer range) would box each
   * one and compare the boxes on every lookup: a cache miss apiece in a fleet simulation.
   */
  private readonly classes = new OrderedMap53();
  private readonly unseen: Learned = { ratio: 1, answers: 0 };

  constructor(private readonly o: OutputLengthOptions) {
    if (!(o.alpha >= 1 / MAX_COUNTED && o.alpha <= 1)) throw new Error(`output-length alpha must be in [1/${MAX_COUNTED}, 1], got ${o.alpha}`);
  }

  /** Output tokens expected of `req`: at least 1, at most its max_tokens. */
  expected(req: RouteRequest): number {
    const key = classOf(req);
    const learned = key === undefined ? undefined : this.classes.get(key);
    const ratio = learned !== undefined ? learned : this.unseen.answers > 0 ? this.unseen.ratio : 1;
    return Math.max(1, Math.min(req.maxTokens, Math.round(ratio * req.maxTokens)));
  }

  /** Hook: `req` finished with `outputTokens` of its max_tokens. */
  onComplete(req: RouteRequest, outputTokens: number): void {
    if (!(outputTokens >= 0) || !(req.maxTokens > 0)) return;
    const ratio = Math.min(1, outputTokens / req.maxTokens);
    const key = classOf(req);
    const answers = key === undefined ? 0 : this.classes.tag(key);
    if (answers === 0) {
      // A prompt not seen before: it teaches what first-seen prompts answer, and starts its class.
      update(this.unseen, ratio, this.o.alpha);
      if (key === undefined) return;
      if (this.classes.size >= this.o.maxClasses) this.classes.delete(this.classes.oldestKey()!);
      this.classes.setLast(key, ratio, 1);
      return;
    }
    const c: Learned = { ratio: this.classes.get(key!)!, answers };
    update(c, ratio, this.o.alpha);
    this.classes.setLast(key!, c.ratio, Math.min(c.answers, MAX_COUNTED));
  }

  /** Classes with a learned ratio, and the first-seen prompts' ratio (for /admin and tests). */
  describe(): { classes: number; unseenRatio: number | null } {
    return { classes: this.classes.size, unseenRatio: this.unseen.answers > 0 ? round3(this.unseen.ratio) : null };
  }
}

/** A running mean over the first 1/alpha answers, then an exponential average. */
function update(l: Learned, ratio: number, alpha: number): void {
  l.answers++;
  const w = Math.max(alpha, 1 / l.answers);
  l.ratio += w * (ratio - l.ratio);
}

/** A request's class, kept from its decision for its completion (null: no class). */
const CLASS = stateKey<number | null>('kvgate.output-class');

/**
 * The hash of the prompt's first CLASS_BLOCKS blocks (fewer for a shorter prompt); none under one
 * block. Kept in the request's state: the completion reads it there, the gateway having let go of
 * the prompt's token ids by then (at the answer's first token).
 */
function classOf(req: RouteRequest): number | undefined {
  let key = req.state.get(CLASS);
  if (key === undefined) {
    const b = promptBlocks(req.state, req.promptTokens, CLASS_BLOCK_SIZE);
    key = b.length === 0 ? null : b.at(Math.min(CLASS_BLOCKS, b.length) - 1)!;
    req.state.set(CLASS, key);
  }
  return key ?? undefined;
}

const round3 = (x: number): number => Math.round(x * 1000) / 1000;
