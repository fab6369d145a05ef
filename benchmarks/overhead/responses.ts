/**
 * The stand-in worker's answers, shared by the Node stand-in (upstream.ts) and the nginx one
 * (nginx.ts): a chat completion, a 64-chunk SSE stream, and the vLLM metrics a gateway scrapes.
 */
export const MODEL = process.env.OVERHEAD_MODEL ?? 'bench-model';
const SSE_CHUNKS = 64;

export const completion = JSON.stringify({
  id: 'cmpl-bench',
  object: 'chat.completion',
  created: 1_700_000_000,
  model: MODEL,
  choices: [{ index: 0, message: { role: 'assistant', content: 'the quick brown fox jumps over the lazy dog' }, finish_reason: 'stop' }],
  usage: { prompt_tokens: 12, completion_tokens: 9, total_tokens: 21 },
});

export const chunks: string[] = [];
for (let i = 0; i < SSE_CHUNKS; i++) {
  const c = {
    id: 'chatcmpl-bench',
    object: 'chat.completion.chunk',
    created: 1_700_000_000,
    model: MODEL,
    choices: [{ index: 0, delta: i === 0 ? { role: 'assistant', content: 'tok' } : { content: ' tok' }, finish_reason: i === SSE_CHUNKS - 1 ? 'length' : null }],
  };
  chunks.push(`data: ${JSON.stringify(c)}\n\n`);
}

export const metrics = [
  '# TYPE vllm:num_requests_running gauge',
  `vllm:num_requests_running{engine="0",model_name="${MODEL}"} 0`,
  '# TYPE vllm:num_requests_waiting gauge',
  `vllm:num_requests_waiting{engine="0",model_name="${MODEL}"} 0`,
  '# TYPE vllm:kv_cache_usage_perc gauge',
  `vllm:kv_cache_usage_perc{engine="0",model_name="${MODEL}"} 0.1`,
  '',
].join('\n');

