/**
 * The routes a simulated SGLang worker (`kvgate sim --engine sglang`) serves differently from a
 * vLLM one (sgl-project/sglang python/sglang/srt/entrypoints/http_server.py): its native
 * `/generate` (native-generate.ts), `/v1/tokenize` (entrypoints/openai/serving_tokenize.py: a
 * prompt or list of prompts, no chat messages), `/get_model_info` and `/flush_cache`; vLLM's own
 * routes (`/tokenize`, `/detokenize`, `/inference/v1/generate`, `/reset_prefix_cache`, LoRA
 * loading under /v1) are not there. The OpenAI routes, /health, /v1/models and /metrics (with
 * SGLang's names) are the shared ones.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { z } from 'zod';
import { estimateTokenizer } from '../../tokenizer/index.js';
import { sglangGenerate, type NativeHost } from './native-generate.js';
import { parseBody, sendJson } from './openai-protocol.js';

const VLLM_ONLY = new Set(['/tokenize', '/detokenize', '/inference/v1/generate', '/reset_prefix_cache', '/v1/load_lora_adapter', '/v1/unload_lora_adapter', '/ping', '/version']);

const tokenizeBody = z.looseObject({
  model: z.string().nullable().optional(),
  prompt: z.union([z.string(), z.array(z.string())]),
  add_special_tokens: z.boolean().optional(),
});

/**
 * Serve `path` if it is one of SGLang's own (or one of vLLM's it lacks); false: the shared routes
 * serve it. `post` reads a JSON body and runs the handler (the worker's body limits and errors).
 */
export function sglangRoute(
  host: NativeHost & { flushCache(): void },
  path: string,
  method: string,
  req: IncomingMessage,
  res: ServerResponse,
  post: (fn: (body: unknown) => Promise<void> | void) => Promise<void>,
): Promise<void> | false {
  if (VLLM_ONLY.has(path)) return Promise.resolve(sendJson(res, 404, { detail: 'Not Found' }));
  switch (path) {
    case '/generate':
      return post((b) => sglangGenerate(host, req, res, b));
    case '/v1/tokenize':
      return post((raw) => {
        const b = parseBody(tokenizeBody, raw);
        const max = host.engine.config.maxModelLen;
        if (typeof b.prompt === 'string') {
          const tokens = estimateTokenizer.encode(b.prompt);
          return sendJson(res, 200, { tokens, count: tokens.length, max_model_len: max });
        }
        const tokens = b.prompt.map((p) => estimateTokenizer.encode(p));
        sendJson(res, 200, { tokens, count: tokens.map((t) => t.length), max_model_len: max });
      });
    case '/get_model_info':
      if (method !== 'GET') return Promise.resolve(sendJson(res, 405, { detail: 'Method Not Allowed' }, { allow: 'GET' }));
      return Promise.resolve(sendJson(res, 200, { model_path: host.model, tokenizer_path: host.model, is_generation: true }));
    case '/flush_cache':
      // SGLang's answer is plain text; it flushes only when no request is running.
      host.flushCache();
      res.writeHead(200, { 'content-type': 'text/plain; charset=utf-8' });
      res.end('Cache flushed.\nPlease check backend logs for more details. (When there are running or waiting requests, the operation will not be performed.)\n');
      return Promise.resolve();
    default:
      return false;
  }
}
