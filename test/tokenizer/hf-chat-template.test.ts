/** hf: tokenizers render chat prompts with the model's own chat template, as vLLM does, and tokenize them as it does. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { preparePrompt } from '../../src/gateway/pipeline/prepare.js';
import { DEFAULT_CHAT_RENDER, renderChat, type ChatMessageLike } from '../../src/tokenizer/chat-template.js';
import { loadHfTokenizer, openFinalMessage } from '../../src/tokenizer/hf.js';
import { TokenizerRegistry } from '../../src/tokenizer/registry.js';
import type { ChatCompletionRequest } from '../../src/api/schemas.js';
import { bpeTokenizerJson, withTokenizerDir } from './fixtures.js';

/** Letters (and ':'), a few merges, '<s>' put in front of every text encoded with special tokens. */
const TOKENIZER_JSON = bpeTokenizerJson(
  { ...Object.fromEntries([...'abcdefghijklmnopqrstuvwxyz:'].map((c, i) => [c, i + 1])), us: 28, er: 29, user: 30 },
  ['u s', 'e r', 'us er'],
);

/** A Llama-2-like template: BOS written by the template, roles in brackets, tools counted. */
const TEMPLATE =
  "{{ bos_token }}{% if tools %}tools: {{ tools | length }} {% endif %}{% for m in messages %}{% if m.content == 'refused' %}{{ raise_exception('the template refuses this') }}{% endif %}{{ m.role }}: {{ m.content }} {% endfor %}{% if add_generation_prompt %}assistant: {% endif %}";

function withModel(config: Record<string, unknown> | null, f: (path: string) => Promise<void>): Promise<void> {
  const files: Record<string, unknown> = { 'tokenizer.json': TOKENIZER_JSON };
  if (config !== null) files['tokenizer_config.json'] = config;
  return withTokenizerDir(files, (dir) => f(join(dir, 'tokenizer.json')));
}

const body = (messages: readonly ChatMessageLike[], extra: Record<string, unknown> = {}): ChatCompletionRequest =>
  ({ model: 'm', messages, ...extra }) as unknown as ChatCompletionRequest;

test("a chat prompt is rendered with the model's template and tokenized without adding special tokens", async () => {
  await withModel({ chat_template: TEMPLATE, bos_token: { content: '<s>', special: true } }, async (path) => {
    const tok = await loadHfTokenizer(path);
    assert.equal(tok.chatTemplateProblem, null);
    const messages: ChatMessageLike[] = [
      { role: 'system', content: 'be brief' },
      { role: 'user', content: [{ type: 'text', text: 'hello' }, { type: 'image_url', image_url: { url: 'x' } }, { type: 'text', text: 'world' }] },
    ];
    const rendered = '<s>system: be brief user: hello\nworld assistant: ';
    assert.equal(tok.renderChat(messages, DEFAULT_CHAT_RENDER), rendered);
    const p = preparePrompt('chat', body(messages), tok, 256);
    assert.equal(p.promptText, rendered);
    assert.equal(p.addSpecialTokens, false);
    const ids = Array.from((p.promptTokens as () => ArrayLike<number>)());
    assert.deepEqual(ids, tok.encode(rendered, false));
    assert.equal(ids.filter((x) => x === 0).length, 1, 'one BOS: the template’s, none added');
    assert.equal((p.promptTokens as unknown as { count(): number }).count(), ids.length);
    // The request's tools reach the template, as vLLM passes them.
    assert.match(preparePrompt('chat', body(messages, { tools: [{ type: 'function' }, { type: 'function' }] }), tok, 256).promptText, /^<s>tools: 2 /);
  });
});

test("messages the template refuses, or a model without a template, use kvgate's own template", async () => {
  await withModel({ chat_template: TEMPLATE, bos_token: '<s>' }, async (path) => {
    const tok = await loadHfTokenizer(path);
    const messages = [{ role: 'user', content: 'refused' }];
    assert.equal(tok.renderChat(messages, DEFAULT_CHAT_RENDER), null);
    const p = preparePrompt('chat', body(messages), tok, 256);
    assert.equal(p.promptText, renderChat(messages));
    assert.equal(p.addSpecialTokens, undefined);
  });
  await withModel(null, async (path) => {
    const tok = await loadHfTokenizer(path);
    assert.equal(tok.chatTemplate, null);
    assert.equal(preparePrompt('chat', body([{ role: 'user', content: 'hi' }]), tok, 256).promptText, renderChat([{ role: 'user', content: 'hi' }]));
  });
});

test("named templates: the 'default' one is used; one that does not parse is reported at load, not fatal", async () => {
  await withModel({ chat_template: [{ name: 'tool_use', template: 'tools!' }, { name: 'default', template: TEMPLATE }], bos_token: '<s>' }, async (path) => {
    const tok = await loadHfTokenizer(path);
    assert.equal(tok.renderChat([{ role: 'user', content: 'hi' }], DEFAULT_CHAT_RENDER), '<s>user: hi assistant: ');
  });
  await withModel({ chat_template: '{% for m in messages %}{{ m.content }', bos_token: '<s>' }, async (path) => {
    const warnings: string[] = [];
    const reg = await TokenizerRegistry.create({ m: `hf:${path}` }, { threads: 0, onWarning: (_spec, message) => warnings.push(message) });
    try {
      assert.equal(warnings.length, 1);
      assert.match(warnings[0]!, /chat template does not parse.*kvgate's own/);
      const tok = reg.for('m').sync!;
      assert.equal(preparePrompt('chat', body([{ role: 'user', content: 'hi' }]), tok, 256).promptText, renderChat([{ role: 'user', content: 'hi' }]));
    } finally {
      await reg.close();
    }
  });
});

/** A Qwen3-like template: a thinking switch from chat_template_kwargs, documents, an end-of-turn token. */
const QWEN_LIKE =
  "{% for d in documents or [] %}doc: {{ d.text }} {% endfor %}{% for m in messages %}<{{ m.role }}>{{ m.content }}<end> {% endfor %}{% if add_generation_prompt %}<assistant>{% if enable_thinking is defined and not enable_thinking %}<think></think>{% endif %}{% endif %}";

test('the request’s rendering parameters reach the template as vLLM passes them', async () => {
  await withModel({ chat_template: QWEN_LIKE, bos_token: '<s>' }, async (path) => {
    const tok = await loadHfTokenizer(path);
    const messages: ChatMessageLike[] = [{ role: 'user', content: 'hi' }];
    const text = (extra: Record<string, unknown>): string => preparePrompt('chat', body(messages, extra), tok, 256).promptText;
    assert.equal(text({}), '<user>hi<end> <assistant>');
    // chat_template_kwargs: a variable of the template's own.
    assert.equal(text({ chat_template_kwargs: { enable_thinking: false } }), '<user>hi<end> <assistant><think></think>');
    // …which cannot override what the request sets by its own fields.
    assert.equal(text({ chat_template_kwargs: { add_generation_prompt: false, messages: [] } }), '<user>hi<end> <assistant>');
    assert.equal(text({ add_generation_prompt: false }), '<user>hi<end> ');
    assert.equal(text({ documents: [{ text: 'A' }, { text: 'B' }] }), 'doc: A doc: B <user>hi<end> <assistant>');
    // continue_final_message: the last message left open, its end-of-turn token cut off.
    const prefill: ChatMessageLike[] = [...messages, { role: 'assistant', content: 'The answer is' }];
    assert.equal(preparePrompt('chat', body(prefill, { continue_final_message: true, add_generation_prompt: false }), tok, 256).promptText, '<user>hi<end> <assistant>The answer is');
    // add_special_tokens: true adds the tokenizer's BOS on top of the rendered text.
    const p = preparePrompt('chat', body(messages, { add_special_tokens: true }), tok, 256);
    assert.equal(p.addSpecialTokens, true);
    const ids = Array.from((p.promptTokens as () => ArrayLike<number>)());
    assert.deepEqual(ids, tok.encode(p.promptText, true));
    assert.equal(ids[0], 0);
    // A request that brings its own template is not rendered with the model's (nor with its own).
    assert.equal(text({ chat_template: '{{ messages[0].content }}' }), renderChat(messages));
  });
});

test('continue_final_message cuts the rendering after the last message’s text, as transformers does', () => {
  assert.equal(openFinalMessage('<u>hi<e><a>The answer<e>', 'The answer'), '<u>hi<e><a>The answer');
  // Its last occurrence: the text may appear earlier in the chat.
  assert.equal(openFinalMessage('<u>yes<e><a>yes<e>', 'yes'), '<u>yes<e><a>yes');
  // Trailing spaces kept where the template kept them, dropped where it trimmed them.
  assert.equal(openFinalMessage('<a>so  <e>', 'so  '), '<a>so  ');
  assert.equal(openFinalMessage('<a>so<e>', 'so  '), '<a>so');
  // Not shown at all: no rendering (kvgate's template is used instead).
  assert.equal(openFinalMessage('<a>[redacted]<e>', 'secret'), null);
});
