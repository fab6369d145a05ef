export type { Tokenizer } from './types.js';
export { estimateTokenizer } from './estimate.js';
export { renderChat, type ChatMessageLike } from './chat-template.js';
export * from './vocabulary.js';
