/**
 * The simulated worker's answers to `POST /v1/responses` in the shapes of OpenAI's Responses API as
 * vLLM writes them (vllm/entrypoints/openai/protocol.py, ResponsesResponse and the stream events):
 * one assistant message with one `output_text` part. A stream is a sequence of typed events
 * (`event: <type>` then `data: <json>`), numbered by `sequence_number`, that ends with
 * `response.completed` (or `response.incomplete` when max_output_tokens cut it) carrying the whole
 * response with its usage; there is no `[DONE]`.
 */
import type { Usage } from './openai-protocol.js';

export interface ResponseState {
  id: string;
  model: string;
  createdAt: number;
  instructions: string | null;
  maxOutputTokens: number | null;
  temperature: number;
  topP: number;
}

export type ResponseStatus = 'in_progress' | 'completed' | 'incomplete';

/** The output message's id, derived from the response's. */
const messageId = (r: ResponseState): string => `msg_${r.id.replace(/^resp_/, '')}`;

/** The response object; `text` and `usage` once it is over. */
export function responseObject(r: ResponseState, status: ResponseStatus, text: string, usage: Usage | null): Record<string, unknown> {
  const done = status !== 'in_progress';
  const part = { type: 'output_text', text, annotations: [], logprobs: null };
  return {
    id: r.id,
    object: 'response',
    created_at: r.createdAt,
    model: r.model,
    status,
    incomplete_details: status === 'incomplete' ? { reason: 'max_output_tokens' } : null,
    instructions: r.instructions,
    max_output_tokens: r.maxOutputTokens,
    output: done ? [{ id: messageId(r), type: 'message', status: 'completed', role: 'assistant', content: [part] }] : [],
    parallel_tool_calls: true,
    previous_response_id: null,
    temperature: r.temperature,
    tool_choice: 'auto',
    tools: [],
    top_p: r.topP,
    // Last but one, as vLLM writes it: the gateway reads output_tokens from the answer's end.
    usage:
      usage === null
        ? null
        : {
            input_tokens: usage.prompt_tokens,
            input_tokens_details: { cached_tokens: usage.prompt_tokens_details?.cached_tokens ?? 0 },
            output_tokens: usage.completion_tokens,
            output_tokens_details: { reasoning_tokens: 0 },
            total_tokens: usage.total_tokens,
          },
    user: null,
  };
}

/**
 * Writes one stream's events in order, numbering them. As vLLM's responses_stream_generator does,
 * the response is announced (created, in progress) as soon as the request is accepted, and its
 * message and text part begin with the first generated token: a client (or a gateway) sees its
 * first bytes before the prompt is prefilled, and its first output event at the first token.
 */
export class ResponseEvents {
  private seq = 0;
  private opened = false;

  constructor(
    private readonly r: ResponseState,
    private readonly write: (text: string) => void,
  ) {}

  private event(type: string, fields: Record<string, unknown>): void {
    this.write(`event: ${type}\ndata: ${JSON.stringify({ type, sequence_number: this.seq++, ...fields })}\n\n`);
  }

  /** The response exists. */
  start(): void {
    const r = this.r;
    this.event('response.created', { response: responseObject(r, 'in_progress', '', null) });
    this.event('response.in_progress', { response: responseObject(r, 'in_progress', '', null) });
  }

  /** Its message and text part begin (at the first token). */
  private open(): void {
    if (this.opened) return;
    this.opened = true;
    const r = this.r;
    const item = { id: messageId(r), type: 'message', status: 'in_progress', role: 'assistant', content: [] };
    this.event('response.output_item.added', { output_index: 0, item });
    this.event('response.content_part.added', { item_id: messageId(r), output_index: 0, content_index: 0, part: { type: 'output_text', text: '', annotations: [] } });
  }

  delta(text: string): void {
    this.open();
    this.event('response.output_text.delta', { item_id: messageId(this.r), output_index: 0, content_index: 0, delta: text, logprobs: [] });
  }

  /** The text is complete: close the part, the message and the response. */
  end(status: 'completed' | 'incomplete', text: string, usage: Usage): void {
    this.open();
    const r = this.r;
    const part = { type: 'output_text', text, annotations: [], logprobs: null };
    this.event('response.output_text.done', { item_id: messageId(r), output_index: 0, content_index: 0, text, logprobs: [] });
    this.event('response.content_part.done', { item_id: messageId(r), output_index: 0, content_index: 0, part });
    this.event('response.output_item.done', {
      output_index: 0,
      item: { id: messageId(r), type: 'message', status: 'completed', role: 'assistant', content: [part] },
    });
    this.event(`response.${status}`, { response: responseObject(r, status, text, usage) });
  }
}
