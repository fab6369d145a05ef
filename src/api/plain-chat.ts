/**
 * The chat request of the plain shape nearly every client sends — a model, messages whose content
 * is text, the usual sampling fields — checked and copied by hand, as zod's chatCompletionRequestSchema
 * (schemas.ts) outputs it: a new object with the schema's fields in the schema's order, then the
 * fields it does not know in the request's order, each message likewise. Anything else (a content
 * array, `stop` as a list, `documents`, a value out of range, a field this file does not know) gives
 * null and the schema judges the request, so every refusal and its message are zod's. zod's generic
 * object parser was the largest share of validating a request (test/api/plain-chat.test.ts checks
 * this copy against the schema on random requests).
 */
import { chatCompletionRequestSchema, type ChatCompletionRequest } from './schemas.js';

type Check = (v: unknown) => boolean;

const isString: Check = (v) => typeof v === 'string';
const isBoolean: Check = (v) => typeof v === 'boolean';
const orNull = (c: Check): Check => (v) => v === null || c(v);
const between = (lo: number, hi: number): Check => (v) => typeof v === 'number' && v >= lo && v <= hi;
/** zod's z.int(): a safe integer. */
const int = (lo = -Number.MAX_SAFE_INTEGER, hi = Number.MAX_SAFE_INTEGER): Check => (v) => Number.isSafeInteger(v) && (v as number) >= lo && (v as number) <= hi;

/** The schema's fields this copy checks: a value passing its check is one the schema accepts as it is. */
const CHECKS: Readonly<Record<string, Check>> = {
  model: (v) => typeof v === 'string' && v.length > 0,
  stream: orNull(isBoolean),
  max_tokens: orNull(int(1)),
  temperature: orNull(between(0, 2)),
  top_p: orNull(between(0, 1)),
  n: orNull(int(1, 128)),
  stop: orNull(isString),
  presence_penalty: orNull(between(-2, 2)),
  frequency_penalty: orNull(between(-2, 2)),
  seed: orNull(int()),
  user: isString,
  priority: int(),
  max_completion_tokens: orNull(int(1)),
  add_generation_prompt: isBoolean,
  continue_final_message: isBoolean,
  add_special_tokens: isBoolean,
  chat_template: orNull(isString),
};

/** The schema's fields, in its order (the order its output has them in). */
const FIELDS: readonly string[] = Object.keys(chatCompletionRequestSchema.shape);
const KNOWN = new Set(FIELDS);
const ROLES = new Set(chatCompletionRequestSchema.shape.messages.element.shape.role.options as readonly string[]);
const MESSAGE_FIELDS = ['role', 'content', 'name'] as const;

const isPlainObject = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The request as the schema would output it, or null when the schema must judge it. */
export function plainChatRequest(input: unknown): ChatCompletionRequest | null {
  if (!isPlainObject(input)) return null;
  const out: Record<string, unknown> = {};
  for (const k of FIELDS) {
    if (!(k in input)) continue;
    const v = input[k];
    if (k === 'messages') {
      const messages = plainMessages(v);
      if (messages === null) return null;
      out.messages = messages;
    } else if (k === 'stream_options') {
      const o = plainStreamOptions(v);
      if (o === undefined) return null;
      out.stream_options = o;
    } else {
      const check = CHECKS[k];
      if (check === undefined || !check(v)) return null;
      out[k] = v;
    }
  }
  if (out.messages === undefined || out.model === undefined) return null;
  // The schema's refinement: a last message continued or answered, not both.
  if (out.continue_final_message === true && out.add_generation_prompt === true) return null;
  if (!copyUnknown(input, KNOWN, out)) return null;
  return out as ChatCompletionRequest;
}

function plainMessages(v: unknown): Record<string, unknown>[] | null {
  if (!Array.isArray(v) || v.length === 0) return null;
  const out: Record<string, unknown>[] = [];
  for (const m of v as unknown[]) {
    if (!isPlainObject(m)) return null;
    if (typeof m.role !== 'string' || !ROLES.has(m.role)) return null;
    if ('content' in m && m.content !== null && typeof m.content !== 'string') return null;
    if ('name' in m && typeof m.name !== 'string') return null;
    const copy: Record<string, unknown> = {};
    for (const k of MESSAGE_FIELDS) if (k in m) copy[k] = m[k];
    if (!copyUnknown(m, MESSAGE_KNOWN, copy)) return null;
    out.push(copy);
  }
  return out;
}

const MESSAGE_KNOWN = new Set<string>(MESSAGE_FIELDS);

/** `stream_options` as the schema outputs it (null, or a copy with include_usage first); undefined: the schema judges. */
function plainStreamOptions(v: unknown): Record<string, unknown> | null | undefined {
  if (v === null) return null;
  if (!isPlainObject(v)) return undefined;
  const copy: Record<string, unknown> = {};
  if ('include_usage' in v) {
    if (typeof v.include_usage !== 'boolean') return undefined;
    copy.include_usage = v.include_usage;
  }
  return copyUnknown(v, INCLUDE_USAGE, copy) ? copy : undefined;
}

const INCLUDE_USAGE = new Set(['include_usage']);

/**
 * The fields of `from` not in `known`, in order, onto `to` (a loose object keeps them as they
 * are). False for a field named `__proto__` (JSON.parse makes it an own field; the schema's copy
 * drops it): the schema judges that request.
 */
function copyUnknown(from: Record<string, unknown>, known: ReadonlySet<string>, to: Record<string, unknown>): boolean {
  for (const k of Object.keys(from)) {
    if (known.has(k)) continue;
    if (k === '__proto__') return false;
    to[k] = from[k];
  }
  return true;
}
