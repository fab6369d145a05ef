import type { ChatMessageLike, ChatRenderOptions } from './chat-template.js';

export interface Tokenizer {
  readonly name: string;
  /**
   * `addSpecialTokens: false` for text that has them written out (a prompt rendered with the
   * model's chat template); tokenizers without special tokens ignore it.
   */
  encode(text: string, addSpecialTokens?: boolean): number[];
  decode(ids: ArrayLike<number>): string;
  /** Number of tokens in `text`, possibly cheaper than encode(). */
  count(text: string): number;
  /**
   * A chat prompt rendered with the model's own chat template, as the engine renders it (special
   * tokens written out: encode it without adding more); null when this tokenizer has no template
   * or it fails on these messages. Tokenizers without one leave it out (kvgate's template applies).
   */
  renderChat?(messages: readonly ChatMessageLike[], opts: ChatRenderOptions): string | null;
}
