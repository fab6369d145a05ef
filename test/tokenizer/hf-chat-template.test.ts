/** hf: tokenizers render chat prompts with the model's own chat template, as vLLM does, and tokenize them as it does. */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { preparePrompt } from '../../src/gateway/prepare.js';
import { renderChat, type ChatMessageLike } from '../../src/tokenizer/chat-template.js';
import { loadHfTokenizer } from '../../src/tokenizer/hf.js';
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
    assert.equal(tok.renderChat(messages), rendered);
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
    assert.equal(tok.renderChat(messages), null);
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
    assert.equal(tok.renderChat([{ role: 'user', content: 'hi' }]), '<s>user: hi assistant: ');
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
