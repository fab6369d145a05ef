/** Speech to text (`/v1/audio/transcriptions`, `/translations`): multipart uploads routed by model and relayed as they came. */
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { test } from 'node:test';
import { MODEL, metricValue, startGateway, startSims, startStub, workerStandIn } from './helpers.js';

const sha = (b: Uint8Array): string => createHash('sha256').update(b).digest('hex');

/** Worker stand-ins that parse the upload as vLLM would and say what they got. */
async function startAudioWorkers(names: string[]) {
  return Promise.all(
    names.map((name) =>
      startStub((req, res) => {
        if (req.method === 'GET') return workerStandIn(() => undefined)(req, res);
        const chunks: Buffer[] = [];
        req.on('data', (c: Buffer) => chunks.push(c));
        const answer = async () => {
          const raw = Buffer.concat(chunks);
          const ct = req.headers['content-type'] ?? '';
          const form = await new Response(raw, { headers: { 'content-type': ct } }).formData();
          const file = form.get('file') as File;
          const audio = new Uint8Array(await file.arrayBuffer());
          const body = JSON.stringify({ text: `heard ${audio.length} bytes`, worker: name, path: req.url, model: form.get('model'), language: form.get('language'), sha: sha(audio), contentType: ct, bodySha: sha(raw) });
          res.writeHead(200, { 'content-type': 'application/json' });
          res.end(body);
        };
        // A stand-in that fails answers 500, which the test's status assertion reports.
        req.on('end', () => void answer().catch((err: unknown) => res.writeHead(500).end(String(err))));
      }),
    ),
  );
}

function upload(fields: Record<string, string>, audio?: Uint8Array): FormData {
  const f = new FormData();
  for (const [k, v] of Object.entries(fields)) f.append(k, v);
  if (audio) f.append('file', new Blob([audio], { type: 'audio/wav' }), 'speech.wav');
  return f;
}

test('an audio upload is routed by its model and relayed byte for byte, larger than a JSON body may be', async () => {
  const workers = await startAudioWorkers(['a', 'b']);
  const { gw, url } = await startGateway(workers.map((w) => w.url));
  try {
    // 4.5 MB: over limits.maxBodyBytes (4 MiB), under maxUploadBytes (25 MiB).
    const audio = randomBytes(4_500_000);
    const form = upload({ model: MODEL, language: 'en', prompt: 'A talk about KV caches.' }, audio);
    // What the client sends, serialised once, so the worker's copy can be compared byte for byte.
    const sent = new Request('http://x', { method: 'POST', body: form });
    const ct = sent.headers.get('content-type')!;
    const bytes = new Uint8Array(await sent.arrayBuffer());
    const r = await fetch(url + '/v1/audio/transcriptions', { method: 'POST', headers: { 'content-type': ct }, body: bytes });
    assert.equal(r.status, 200);
    const got = (await r.json()) as Record<string, string>;
    assert.equal(got.text, `heard ${audio.length} bytes`);
    assert.equal(got.path, '/v1/audio/transcriptions');
    assert.equal(got.model, MODEL);
    assert.equal(got.language, 'en');
    assert.equal(got.sha, sha(audio));
    assert.equal(got.bodySha, sha(bytes), 'the body reaches the worker as the client sent it');
    assert.equal(got.contentType, ct, 'with the client’s boundary');
    assert.match(r.headers.get('x-request-id') ?? '', /^[0-9a-f-]{36}$/);

    const t = await fetch(url + '/v1/audio/translations', { method: 'POST', body: upload({ model: MODEL }, randomBytes(1000)) });
    assert.equal(t.status, 200);
    assert.equal(((await t.json()) as { path: string }).path, '/v1/audio/translations');

    const metrics = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(metrics, 'kvgate_requests_total', { route: 'audio_transcriptions', model: MODEL, status: '200' }), 1);
    assert.equal(metricValue(metrics, 'kvgate_requests_total', { route: 'audio_translations', model: MODEL, status: '200' }), 1);
  } finally {
    await gw.close();
    for (const w of workers) await w.close();
  }
});

test('bad uploads are refused in OpenAI’s shape, naming what is wrong, and never reach a worker', async () => {
  let posts = 0;
  const worker = await startStub(workerStandIn((_req, _body, res) => {
    posts++;
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end('{}');
  }));
  const { gw, url } = await startGateway([worker.url], { limits: { maxUploadBytes: 100_000 } });
  const send = async (body: string | FormData, headers: Record<string, string> = {}) => {
    const r = await fetch(url + '/v1/audio/transcriptions', { method: 'POST', headers, body });
    return { status: r.status, error: ((await r.json()) as { error: { type: string; code: string; param: string | null; message: string } }).error };
  };
  try {
    const json = await send(JSON.stringify({ model: MODEL, file: 'x' }), { 'content-type': 'application/json' });
    assert.equal(json.status, 415);
    assert.match(json.error.message, /multipart\/form-data/);
    const noFile = await send(upload({ model: MODEL }));
    assert.deepEqual([noFile.status, noFile.error.param, noFile.error.type], [400, 'file', 'invalid_request_error']);
    const noModel = await send(upload({ language: 'en' }, randomBytes(100)));
    assert.deepEqual([noModel.status, noModel.error.param], [400, 'model']);
    const unknown = await send(upload({ model: 'whisper-nowhere' }, randomBytes(100)));
    assert.deepEqual([unknown.status, unknown.error.code], [404, 'model_not_found']);
    const garbled = await send('--nope\r\nnot a form', { 'content-type': 'multipart/form-data; boundary=xyz' });
    assert.deepEqual([garbled.status, garbled.error.code], [400, 'invalid_form']);
    const noBoundary = await send('x', { 'content-type': 'multipart/form-data' });
    assert.equal(noBoundary.status, 415);
    const big = await send(upload({ model: MODEL }, randomBytes(200_000)));
    assert.deepEqual([big.status, big.error.code], [413, 'request_too_large']);
    assert.match(big.error.message, /100000 bytes/);
    assert.equal(posts, 0);
    // The JSON routes still take JSON only.
    const chat = await fetch(url + '/v1/chat/completions', { method: 'POST', body: upload({ model: MODEL }) });
    assert.equal(chat.status, 415);
  } finally {
    await gw.close();
    await worker.close();
  }
});

test('a streamed transcription is relayed as the worker writes it', async () => {
  const worker = await startStub(
    workerStandIn((_req, _body, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"object":"transcription.chunk","choices":[{"delta":{"content":"Hello"}}]}\n\n');
      setTimeout(() => {
        res.write('data: {"object":"transcription.chunk","choices":[{"delta":{"content":" world"}}]}\n\n');
        res.end('data: [DONE]\n\n');
      }, 400);
    }),
  );
  const { gw, url } = await startGateway([worker.url]);
  try {
    const started = Date.now();
    const r = await fetch(url + '/v1/audio/transcriptions', { method: 'POST', body: upload({ model: MODEL, stream: 'true' }, randomBytes(2000)) });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type') ?? '', /text\/event-stream/);
    const reader = r.body!.getReader();
    const first = await reader.read();
    const firstAt = Date.now() - started;
    assert.match(Buffer.from(first.value).toString(), /Hello/);
    assert.ok(firstAt < 350, `the first event came after ${firstAt} ms, not as it was written`);
    let rest = '';
    for (let c = await reader.read(); !c.done; c = await reader.read()) rest += Buffer.from(c.value).toString();
    assert.match(rest, / world[\s\S]*\[DONE\]/);
  } finally {
    await gw.close();
    await worker.close();
  }
});

test('a fleet of text models answers an upload as vLLM does: 400, the model does not serve speech', async () => {
  const sims = await startSims(1);
  const { gw, url } = await startGateway(sims.map((s) => s.url));
  try {
    for (const [path, api] of [['/v1/audio/transcriptions', 'Transcriptions'], ['/v1/audio/translations', 'Translations']] as const) {
      const r = await fetch(url + path, { method: 'POST', body: upload({ model: MODEL }, randomBytes(5000)) });
      assert.equal(r.status, 400);
      const body = (await r.json()) as { error: { message: string; type: string } };
      assert.match(body.error.message, new RegExp(`does not support ${api} API`));
      assert.equal(body.error.type, 'invalid_request_error');
    }
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});
