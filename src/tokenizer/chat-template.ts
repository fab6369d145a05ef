/**
 * The chat template shared by the simulated worker and the gateway's `estimate` tokenizer.
 * A real deployment's engine applies its model's own template; for prefix routing what matters
 * is that messages with equal leading content render to equal leading text, which any template
 * that renders messages in order preserves.
 */
export interface ChatMessageLike {
  role: string;
  content?: unknown;
  name?: string;
}

/**
 * Text of a message's content: a string, or the text parts of a content-part array, joined by
 * `separator` (kvgate's template: none; a model's template as vLLM fills it: a newline).
 */
export function contentText(content: unknown, separator = ''): string {
  if (typeof content === 'string') return content;
  if (Array.isArray(content)) {
    let s = '';
    let first = true;
    for (const part of content) {
      if (part && typeof part === 'object' && (part as { type?: unknown }).type === 'text') {
        const t = (part as { text?: unknown }).text;
        if (typeof t === 'string') {
          s += first ? t : separator + t;
          first = false;
        }
      }
    }
    return s;
  }
  return '';
}

/** What renderChat appends to ask for the assistant's turn. */
export const GENERATION_PROMPT = '<|assistant|>\n';

/** One message as the template renders it: renderChat is these, in order, then GENERATION_PROMPT. */
export function renderMessage(m: ChatMessageLike): string {
  return `<|${m.role}|>\n${contentText(m.content)}\n`;
}

export function renderChat(messages: readonly ChatMessageLike[], addGenerationPrompt = true): string {
  let s = '';
  for (const m of messages) s += renderMessage(m);
  if (addGenerationPrompt) s += GENERATION_PROMPT;
  return s;
}
