export interface Tokenizer {
  readonly name: string;
  encode(text: string): number[];
  decode(ids: ArrayLike<number>): string;
  /** Number of tokens in `text`, possibly cheaper than encode(). */
  count(text: string): number;
}
