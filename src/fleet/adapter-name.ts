/**
 * What a LoRA adapter's name may be. vLLM checks only that `lora_name` is non-empty
 * (OpenAIServingModels._check_load_lora_adapter_request in
 * vllm/entrypoints/openai/serving_models.py; `lora_name: str` in LoadLoRAAdapterRequest,
 * vllm/entrypoints/openai/protocol.py), and the name becomes a model name clients send, a
 * metric label, a log field and a key of the gateway's indexes. So kvgate defines a safe form:
 * a letter or digit, then up to 127 of letters, digits and `. _ : / -` (room for Hugging Face's
 * `org/name` and `name:revision`), with no `.` or `..` path segment and no empty one. That rules
 * out control characters (newlines in logs), bidi and other invisible marks, whitespace, and
 * names that read as paths out of a directory (`../../etc/passwd`) or as object internals
 * (`__proto__` begins with `_`).
 */
const ADAPTER_NAME = /^[A-Za-z0-9][A-Za-z0-9._:/-]{0,127}$/;

/** Why `name` is not a usable adapter name, or null if it is. */
export function adapterNameProblem(name: string): string | null {
  if (!ADAPTER_NAME.test(name)) {
    return 'an adapter name is 1 to 128 characters: a letter or digit, then letters, digits and . _ : / -';
  }
  if (name.split('/').some((s) => s === '' || s === '.' || s === '..')) return "an adapter name has no empty, '.' or '..' path segment";
  return null;
}
