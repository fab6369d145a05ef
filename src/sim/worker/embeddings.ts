/**
 * The simulated worker's `/v1/embeddings`: what vLLM answers for an embedding model
 * (`vllm serve <model> --runner pooling`; vllm/entrypoints/openai/serving_embedding.py). Each input
 * is prefilled by the engine like any prompt — it takes a place in the batch, KV blocks and prefill
 * time, and hits the prefix cache — and its vector is computed from its token ids: the mean of a
 * fixed pseudo-random vector per token id, L2-normalised. So equal inputs get equal vectors, and
 * inputs sharing most of their tokens get close ones, as a client's tests may expect.
 */
import type { ServerResponse } from 'node:http';
import { z } from 'zod';

/** Length of the simulated model's vectors (`dimensions` may ask for fewer: truncated, renormalised). */
export const EMBEDDING_DIM = 256;

const tokenIds = z.array(z.int().nonnegative());

export const embeddingsSchema = z.looseObject({
  model: z.string().nullable().optional(),
  input: z.union([z.string(), z.array(z.string()).min(1), tokenIds.min(1), z.array(tokenIds.min(1)).min(1)], {
    error: 'input must be a string, an array of strings, an array of token ids or an array of such arrays',
  }),
  encoding_format: z.enum(['float', 'base64']).nullable().optional(),
  dimensions: z.int().positive().nullable().optional(),
  priority: z.int().optional(),
  cache_salt: z.string().nullable().optional(),
});

/** One token id's fixed vector component `j`, in [-1, 1). */
function component(token: number, j: number): number {
  let h = Math.imul(token + 0x9e3779b9, 0x85ebca6b) ^ Math.imul(j + 0x7f4a7c15, 0xc2b2ae35);
  h = Math.imul(h ^ (h >>> 16), 0x27d4eb2d);
  h ^= h >>> 15;
  return (h & 0xffff) / 32768 - 1;
}

/** The vector of a prompt: mean of its tokens' vectors, first `dims` components, L2-normalised. */
export function embed(ids: ArrayLike<number>, dims = EMBEDDING_DIM): Float32Array {
  const v = new Float64Array(dims);
  for (let i = 0; i < ids.length; i++) {
    const t = ids[i]!;
    for (let j = 0; j < dims; j++) v[j]! += component(t, j);
  }
  let norm = 0;
  for (let j = 0; j < dims; j++) norm += v[j]! * v[j]!;
  norm = Math.sqrt(norm) || 1;
  const out = new Float32Array(dims);
  for (let j = 0; j < dims; j++) out[j] = v[j]! / norm;
  return out;
}

/** A vector as the response carries it: numbers, or vLLM's base64 of little-endian float32s. */
function encodeEmbedding(v: Float32Array, format: 'float' | 'base64'): number[] | string {
  if (format === 'float') return Array.from(v);
  const b = Buffer.alloc(v.length * 4);
  for (let j = 0; j < v.length; j++) b.writeFloatLE(v[j]!, j * 4);
  return b.toString('base64');
}

/** Vectors serialised per write: a few hundred KB at a time, whatever the number of inputs. */
const VECTORS_PER_WRITE = 64;

export interface EmbeddingsAnswer {
  id: string;
  created: number;
  model: string;
  prompts: ReadonlyArray<ArrayLike<number>>;
  dims: number;
  format: 'float' | 'base64';
}

/**
 * Writes the 200 answer a few vectors at a time, waiting for the socket to drain between writes.
 * One JSON.stringify of the whole answer would build a string of ~5 KB per input (256 floats as
 * text): 100,000 inputs pass V8's longest string (~512 MB) and throw, and far fewer hold hundreds
 * of MB at once. Written in pieces, the process never holds more than one piece. Resolves when the
 * answer is written or the client has gone (the rest is dropped).
 */
export async function writeEmbeddingsAnswer(res: ServerResponse, a: EmbeddingsAnswer): Promise<void> {
  const promptTokens = a.prompts.reduce((n, p) => n + p.length, 0);
  const usage = { prompt_tokens: promptTokens, total_tokens: promptTokens, completion_tokens: 0, prompt_tokens_details: null };
  res.writeHead(200, { 'content-type': 'application/json' });
  const head = JSON.stringify({ id: a.id, object: 'list', created: a.created, model: a.model });
  // The same member order as one JSON.stringify of the whole answer would give.
  let piece = `${head.slice(0, -1)},"data":[`;
  for (let index = 0; index < a.prompts.length; index++) {
    if (index > 0) piece += ',';
    piece += JSON.stringify({ index, object: 'embedding', embedding: encodeEmbedding(embed(a.prompts[index]!, a.dims), a.format) });
    if ((index + 1) % VECTORS_PER_WRITE === 0) {
      if (res.destroyed) return;
      const flushed = res.write(piece);
      piece = '';
      if (!flushed) await drained(res);
    }
  }
  if (res.destroyed) return;
  res.end(`${piece}],"usage":${JSON.stringify(usage)}}`);
}

/** Until the response's buffer drains or the response closes. */
function drained(res: ServerResponse): Promise<void> {
  return new Promise((resolve) => {
    const done = (): void => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}

/**
 * vLLM's refusal of an embeddings input longer than the model's context
 * (vllm/entrypoints/openai/serving_engine.py, OpenAIServing._validate_prompt_and_tokenize: an
 * EmbeddingRequest whose token count exceeds max_model_len is a 400 with this message).
 */
export function inputTooLongMessage(maxModelLen: number, tokens: number): string {
  return (
    `This model's maximum context length is ${maxModelLen} tokens. However, you requested ` +
    `${tokens} tokens in the input for embedding generation. Please reduce the length of the input.`
  );
}
