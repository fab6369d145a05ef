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

/**
 * How a chat request asks for its prompt to be rendered: vLLM's extra chat-completion parameters
 * that change the prompt's text (and so its tokens and the worker's KV blocks).
 */
export interface ChatRenderOptions {
  /** The request's `tools`, for templates that describe them in the prompt. */
  tools?: unknown;
  /** The request's `documents` (RAG templates). */
  documents?: unknown;
  /** `add_generation_prompt` (default true): end with the header of the assistant's turn. */
  addGenerationPrompt: boolean;
  /** `continue_final_message`: leave the last message open for the model to continue it. */
  continueFinalMessage: boolean;
  /** `chat_template_kwargs`: more variables for the template (e.g. `enable_thinking`). */
  templateKwargs?: Readonly<Record<string, unknown>>;
}

/** The rendering a request gets when it sets none of the parameters above. */
export const DEFAULT_CHAT_RENDER: ChatRenderOptions = { addGenerationPrompt: true, continueFinalMessage: false };

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
