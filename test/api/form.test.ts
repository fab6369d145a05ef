import assert from 'node:assert/strict';
import { test } from 'node:test';
import { boundaryOf, checkAudioForm, formFields, isFormType } from '../../src/api/form.js';
import { ApiError } from '../../src/api/errors.js';
import { seededRng } from '../../src/util/rng.js';

/** A FormData serialised as fetch sends it: its bytes and Content-Type. */
async function serialise(f: FormData): Promise<{ body: Buffer; ct: string }> {
  const r = new Request('http://x', { method: 'POST', body: f });
  return { body: Buffer.from(await r.arrayBuffer()), ct: r.headers.get('content-type')! };
}

/** What the platform's own parser (undici's) makes of the same body. */
async function reference(body: Buffer, ct: string): Promise<{ fields: Record<string, string>; files: string[] }> {
  const fields: Record<string, string> = {};
  const files: string[] = [];
  for (const [k, v] of await new Response(body, { headers: { 'content-type': ct } }).formData()) {
    if (typeof v === 'string') {
      if (!Object.hasOwn(fields, k)) fields[k] = v;
    } else files.push(k);
  }
  return { fields, files };
}

test('the fields agree with the platform’s parser on 200 random forms', async () => {
  const rng = seededRng(7);
  const pick = <T>(xs: readonly T[]): T => xs[Math.floor(rng() * xs.length)]!;
  const texts = ['', 'whisper-large-v3', 'en', 'Un café, s’il vous plaît — 日本語 ✓', 'line\r\nbreak', '--not-a-boundary', 'x'.repeat(5000)];
  const names = ['model', 'prompt', 'language', 'temperature', 'stream', 'timestamp_granularities[]', 'naïve name', 'constructor'];
  for (let i = 0; i < 200; i++) {
    const f = new FormData();
    const parts = 1 + Math.floor(rng() * 6);
    for (let p = 0; p < parts; p++) {
      if (rng() < 0.3) {
        const bytes = new Uint8Array(Math.floor(rng() * 3000)).map(() => Math.floor(rng() * 256));
        f.append(pick(['file', 'file', 'other']), new Blob([bytes], { type: 'audio/wav' }), pick(['a.wav', 'speech "1".mp3', 'ü.flac']));
      } else f.append(pick(names), pick(texts));
    }
    const { body, ct } = await serialise(f);
    const got = formFields(body, ct);
    assert.deepEqual({ fields: { ...got.fields }, files: got.files }, await reference(body, ct), `form ${i}`);
  }
});

test('boundaries quoted or not; malformed bodies are a 400 invalid_form', async () => {
  assert.equal(boundaryOf('multipart/form-data; boundary=abc'), 'abc');
  assert.equal(boundaryOf('multipart/form-data; charset=utf-8; boundary="a b:c"'), 'a b:c');
  assert.equal(boundaryOf('multipart/form-data'), null);
  assert.equal(isFormType('multipart/form-data; boundary=abc'), true);
  assert.equal(isFormType('Multipart/Form-Data;charset=utf-8; boundary="x y"'), true);
  assert.equal(isFormType('multipart/form-data'), false);
  assert.equal(isFormType('multipart/mixed; boundary=abc'), false);
  assert.equal(isFormType('application/json; boundary=abc'), false);
  const { body, ct } = await serialise(Object.assign(new FormData(), {}) as FormData);
  assert.deepEqual(formFields(body, ct).files, []);
  const f = new FormData();
  f.append('model', 'm');
  f.append('file', new Blob([new Uint8Array(100)]), 'a.wav');
  const ok = await serialise(f);
  const bad = [
    { body: ok.body.subarray(0, ok.body.length - 60), ct: ok.ct, why: /truncated/ },
    { body: Buffer.from('hello'), ct: ok.ct, why: /does not occur/ },
    { body: ok.body, ct: 'multipart/form-data', why: /no boundary/ },
    { body: ok.body, ct: 'multipart/form-data; boundary=other', why: /does not occur/ },
  ];
  for (const b of bad) {
    assert.throws(
      () => formFields(b.body, b.ct),
      (e: unknown) => e instanceof ApiError && e.status === 400 && e.code === 'invalid_form' && b.why.test(e.message),
    );
  }
  // A preamble before the first boundary is ignored.
  assert.deepEqual({ ...formFields(Buffer.concat([Buffer.from('preamble\r\n'), ok.body]), ok.ct).fields }, { model: 'm' });
});

test('an audio form needs a model and a file', () => {
  assert.deepEqual(checkAudioForm({ fields: { model: 'w', prompt: 'p' }, files: ['file'] }), { model: 'w', prompt: 'p' });
  assert.throws(() => checkAudioForm({ fields: {}, files: ['file'] }), (e: unknown) => e instanceof ApiError && e.param === 'model');
  assert.throws(() => checkAudioForm({ fields: { model: 'w' }, files: [] }), (e: unknown) => e instanceof ApiError && e.param === 'file');
});
