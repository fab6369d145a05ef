export type { Tokenizer } from './types.js';
export { EstimateTokenizer, estimateTokenizer } from './estimate.js';
export { renderChat, contentText, type ChatMessageLike } from './chat-template.js';
export * from './vocabulary.js';
