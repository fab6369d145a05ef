/**
 * OpenAI's Responses API (`POST /v1/responses`) as vLLM serves it: the request fields kvgate reads,
 * and the chat messages a request's `instructions` and `input` amount to — what the worker renders
 * through its chat template, so what the gateway routes on and the simulated worker answers.
 *
 * vLLM (vllm/entrypoints/openai/serving_responses.py) puts `instructions` first as a system
 * message, then the input: a string is one user message; an array holds messages (`role`, and
 * `content` as text or parts) and items of other types — a function call and its output become an
 * assistant and a tool message; reasoning and other items carry nothing to render here.
 */
import { z } from 'zod';

const posInt = z.int().positive();

const contentParts = z.array(z.looseObject({ type: z.string(), text: z.string().optional() }));

/** One input item: a message (`role`), or a typed item (function_call, function_call_output, ...). */
const inputItemSchema = z.looseObject({
  type: z.string().optional(),
  role: z.string().optional(),
  content: z.union([z.string(), contentParts, z.null()]).optional(),
});

export const responsesRequestSchema = z.looseObject({
  model: z.string({ error: 'model is required and must be a string' }).min(1, 'model must not be empty'),
  input: z.union([z.string(), z.array(inputItemSchema).min(1, 'input must not be empty')], {
    error: 'input is required: a string or an array of input items',
  }),
  instructions: z.string().nullable().optional(),
  max_output_tokens: posInt.nullable().optional(),
  stream: z.boolean().nullable().optional(),
  temperature: z.number().min(0).max(2).nullable().optional(),
  top_p: z.number().min(0).max(1).nullable().optional(),
  previous_response_id: z.string().max(256).nullable().optional(),
  user: z.string().optional(),
  priority: z.int().optional(),
});

export type ResponsesRequest = z.infer<typeof responsesRequestSchema>;

export interface ResponsesMessage {
  role: 'system' | 'user' | 'assistant' | 'tool';
  content: string;
}

const ROLES: Record<string, ResponsesMessage['role']> = { system: 'system', developer: 'system', user: 'user', assistant: 'assistant', tool: 'tool' };

/** The text of a message's content: a string, or its parts' text in order. */
function contentText(c: unknown): string {
  if (typeof c === 'string') return c;
  if (!Array.isArray(c)) return '';
  let s = '';
  for (const p of c) if (p !== null && typeof p === 'object' && typeof (p as { text?: unknown }).text === 'string') s += (p as { text: string }).text;
  return s;
}

/** `instructions` and `input` as chat messages, in the order the worker renders them. */
export function responsesMessages(b: Pick<ResponsesRequest, 'instructions' | 'input'>): ResponsesMessage[] {
  const out: ResponsesMessage[] = [];
  if (typeof b.instructions === 'string' && b.instructions !== '') out.push({ role: 'system', content: b.instructions });
  if (typeof b.input === 'string') {
    out.push({ role: 'user', content: b.input });
    return out;
  }
  for (const item of b.input) {
    const it = item as Record<string, unknown>;
    const role = typeof it.role === 'string' ? ROLES[it.role] : undefined;
    if (role !== undefined && (it.type === undefined || it.type === 'message')) {
      out.push({ role, content: contentText(it.content) });
    } else if (it.type === 'function_call_output') {
      out.push({ role: 'tool', content: typeof it.output === 'string' ? it.output : JSON.stringify(it.output ?? '') });
    } else if (it.type === 'function_call') {
      out.push({ role: 'assistant', content: `${String(it.name ?? '')}(${String(it.arguments ?? '')})` });
    }
  }
  return out;
}
