/**
 * Exact tokenization with a Hugging Face `tokenizer.json` (BPE, WordPiece, Unigram models), via
 * @huggingface/tokenizers. Gives the gateway the same token ids the worker computes, so its
 * prefix-block hashes line up with what the worker caches and reports in KV events.
 *
 * SentencePiece-style BPE tokenizers (Llama's and many others: spaces normalised to '▁', no
 * pre-tokenizer) reach Tokenizers.js as one word the length of the prompt, whose byte-pair merges
 * it runs over the whole text and never caches: 0.2–0.3 s of the event loop for a 36 KB prompt with
 * OpenLLaMA's tokenizer.json. Where no piece of the vocabulary has '▁' after another character, no
 * merge can cross a point where a character other than '▁' is followed by '▁', so the text is cut
 * into words there first (a Split pre-tokenizer): the same ids (test/tokenizer/hf-words.test.ts, and
 * 307 texts with OpenLLaMA's), 13–16× faster on such prompts (docs/performance.md), and short words
 * that Tokenizers.js caches.
 */
import { readFile } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { Template } from '@huggingface/jinja';
import { Tokenizer as HfTokenizerImpl } from '@huggingface/tokenizers';
import { contentText, type ChatMessageLike, type ChatRenderOptions } from './chat-template.js';
import type { Tokenizer } from './types.js';

export interface HfTokenizerOptions {
  /**
   * Add the model's special tokens (BOS) like vLLM's completions endpoint does (default true).
   * Chat prompts rendered through a template that already has them should pass false.
   */
  addSpecialTokens?: boolean;
}

/** Cut the '▁'-normalised text into words: a run of '▁' and the characters up to the next '▁'. */
const SENTENCEPIECE_WORDS = { type: 'Split', pattern: { Regex: '\u2581*[^\u2581]+|\u2581+' }, behavior: 'Isolated', invert: true };

/**
 * `json` with SENTENCEPIECE_WORDS as its pre-tokenizer when that leaves its ids unchanged (see the
 * header): a BPE model without word suffixes (they mark a word's last piece, which a cut would
 * move), no pre-tokenizer, a normaliser that writes '▁', '▁' a piece of its own (else it is unknown
 * and fuse_unk could join it to an unknown character before it), and no piece with '▁' after
 * another character. Otherwise `json` itself.
 */
export function withSentencePieceWords(json: Record<string, unknown>): Record<string, unknown> {
  if (json.pre_tokenizer !== null && json.pre_tokenizer !== undefined) return json;
  const model = json.model as { type?: unknown; vocab?: unknown; end_of_word_suffix?: unknown; continuing_subword_suffix?: unknown } | undefined;
  if (model?.type !== 'BPE' || model.vocab === null || typeof model.vocab !== 'object') return json;
  if (model.end_of_word_suffix || model.continuing_subword_suffix) return json;
  if (!Object.hasOwn(model.vocab, '\u2581')) return json;
  // The normaliser is what writes '▁' (Replace ' ' → '▁', Prepend '▁'); without it there is none to cut at.
  if (!JSON.stringify(json.normalizer ?? null).includes('\u2581')) return json;
  for (const piece of Object.keys(model.vocab)) {
    if (/[^\u2581]\u2581/.test(piece)) return json;
  }
  return { ...json, pre_tokenizer: SENTENCEPIECE_WORDS };
}

/**
 * The model's chat template from `tokenizer_config.json` (Jinja, rendered with @huggingface/jinja)
 * and the special tokens it refers to. vLLM renders chat requests with it and tokenizes the result
 * without adding special tokens; a gateway that rendered them its own way would compute ids, and
 * so prefix-block hashes, that never match the blocks the worker reports in its KV events.
 */
class ChatTemplate {
  private readonly template: Template;
  private readonly specials: Record<string, string>;

  /** Throws if `source` does not parse. */
  constructor(source: string, config: Record<string, unknown>) {
    this.template = new Template(source);
    this.specials = {};
    for (const [k, v] of Object.entries(config)) {
      if (!k.endsWith('_token')) continue;
      const text = typeof v === 'string' ? v : v !== null && typeof v === 'object' && typeof (v as { content?: unknown }).content === 'string' ? (v as { content: string }).content : null;
      if (text !== null) this.specials[k] = text;
    }
  }

  /**
   * The rendered prompt, or null if the template fails on these messages (it may refuse some), as
   * vLLM renders a chat request: the request's `chat_template_kwargs` first, then the variables
   * the request sets by their own fields (which win, as they must not be overridden by a kwarg).
   */
  render(messages: readonly ChatMessageLike[], opts: ChatRenderOptions): string | null {
    // Text parts joined by newlines, as vLLM hands content to templates that take strings.
    const flat = messages.map((m) => ({ ...m, content: contentText(m.content, '\n') }));
    const addGenerationPrompt = opts.addGenerationPrompt && !opts.continueFinalMessage;
    let out: string;
    try {
      out = this.template.render({
        ...this.specials,
        ...opts.templateKwargs,
        messages: flat,
        ...(opts.tools !== undefined && opts.tools !== null ? { tools: opts.tools } : {}),
        ...(opts.documents !== undefined && opts.documents !== null ? { documents: opts.documents } : {}),
        add_generation_prompt: addGenerationPrompt,
      });
    } catch {
      return null;
    }
    return opts.continueFinalMessage ? openFinalMessage(out, flat[flat.length - 1]?.content ?? '') : out;
  }
}

/**
 * `continue_final_message`: the rendered chat cut just after the last message's text, so what the
 * template writes to close that message (an end-of-turn token) is left out and the model continues
 * the message. As transformers' apply_chat_template does it: the text found from its last
 * occurrence, trailing spaces kept if the template kept them. Null if the template does not show
 * the text at all (transformers refuses the request then).
 */
export function openFinalMessage(rendered: string, finalText: string): string | null {
  const trimmed = finalText.trim();
  const at = rendered.lastIndexOf(trimmed);
  if (at === -1) return null;
  const kept = finalText.trimStart();
  return rendered.slice(at, at + kept.length) === finalText ? rendered.slice(0, at + kept.length) : rendered.slice(0, at + trimmed.length);
}

/** The template in a tokenizer_config.json: a string, or named templates (the 'default' one). */
function chatTemplateSource(config: Record<string, unknown>): string | null {
  const t = config.chat_template;
  if (typeof t === 'string') return t;
  if (Array.isArray(t)) {
    const named = t as Array<{ name?: unknown; template?: unknown }>;
    const pick = named.find((x) => x?.name === 'default') ?? named[0];
    return typeof pick?.template === 'string' ? pick.template : null;
  }
  return null;
}

export class HfTokenizer implements Tokenizer {
  readonly name: string;
  private readonly impl: HfTokenizerImpl;
  private readonly addSpecialTokens: boolean;
  /** Id used for pieces the vocabulary lacks and the model has no unknown token for. */
  private readonly unknownId: number;
  /** The model's chat template, when its tokenizer_config.json has one that parses. */
  readonly chatTemplate: ChatTemplate | null;
  /** Why the model's chat template is not used, when it has one. */
  readonly chatTemplateProblem: string | null;

  constructor(name: string, impl: HfTokenizerImpl, opts: HfTokenizerOptions = {}, config: Record<string, unknown> = {}) {
    this.name = name;
    this.impl = impl;
    this.addSpecialTokens = opts.addSpecialTokens ?? true;
    this.unknownId = 0;
    const source = chatTemplateSource(config);
    let template: ChatTemplate | null = null;
    let problem: string | null = null;
    if (source !== null) {
      try {
        template = new ChatTemplate(source, config);
      } catch (e) {
        problem = `its chat template does not parse (${(e as Error).message}): chat prompts are rendered with kvgate's own`;
      }
    }
    this.chatTemplate = template;
    this.chatTemplateProblem = problem;
  }

  renderChat(messages: readonly ChatMessageLike[], opts: ChatRenderOptions): string | null {
    return this.chatTemplate?.render(messages, opts) ?? null;
  }

  encode(text: string, addSpecialTokens = this.addSpecialTokens): number[] {
    const ids = this.impl.encode(text, { add_special_tokens: addSpecialTokens }).ids as Array<number | undefined>;
    for (let i = 0; i < ids.length; i++) if (ids[i] === undefined) ids[i] = this.unknownId;
    return ids as number[];
  }

  decode(ids: ArrayLike<number>): string {
    return this.impl.decode(Array.from(ids), { skip_special_tokens: false });
  }

  count(text: string): number {
    return this.encode(text).length;
  }
}

/**
 * Load `tokenizer.json` (and `tokenizer_config.json` beside it, when present). Errors name the
 * file and what is wrong with it.
 */
export async function loadHfTokenizer(path: string, opts: HfTokenizerOptions = {}): Promise<HfTokenizer> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    throw new Error(`cannot read tokenizer file '${path}': ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  let json: unknown;
  try {
    json = JSON.parse(text);
  } catch (err) {
    throw new Error(`tokenizer file '${path}' is not valid JSON: ${(err as Error).message}`);
  }
  if (json === null || typeof json !== 'object' || !('model' in json)) {
    throw new Error(`tokenizer file '${path}' has no "model" section; expected a Hugging Face tokenizer.json`);
  }
  let config: Record<string, unknown> = {};
  try {
    config = JSON.parse(await readFile(join(dirname(path), 'tokenizer_config.json'), 'utf8')) as Record<string, unknown>;
  } catch {
    // Optional: special-token settings and the chat template.
  }
  let impl: HfTokenizerImpl;
  try {
    impl = new HfTokenizerImpl(withSentencePieceWords(json as Record<string, unknown>), config);
  } catch (err) {
    throw new Error(`tokenizer file '${path}' is not supported: ${(err as Error).message}`);
  }
  return new HfTokenizer(`hf:${path}`, impl, opts, config);
}
