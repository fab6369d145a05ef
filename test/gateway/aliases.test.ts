/**
 * Model aliases (config `aliases`): a request naming an alias is served by the model it names,
 * under the served name at the worker (the simulated worker refuses any other name, as vLLM does).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { ConfigError, parseConfig } from '../../src/config/index.js';
import { metricValue, MODEL, post, startGateway, startSims } from './helpers.js';

test('an alias is served as the model it names, listed with its root, and counted under the served name', async () => {
  const sims = await startSims(2);
  const { gw, url } = await startGateway(
    sims.map((s) => s.url),
    {
      aliases: { 'gpt-4o-mini': MODEL },
      tenants: [
        { id: 'a', keys: [{ value: 'sk-tenant-a1' }] },
        { id: 'b', keys: [{ value: 'sk-tenant-b1' }], models: [MODEL] },
      ],
    } as never,
  );
  const A = { authorization: 'Bearer sk-tenant-a1' };
  try {
    const chat = await post(url + '/v1/chat/completions', { model: 'gpt-4o-mini', max_tokens: 3, messages: [{ role: 'user', content: 'hi' }] }, A);
    assert.equal(chat.status, 200, chat.text);
    assert.equal(chat.json.model, MODEL, "the worker's answer names the model that served it");
    const stream = await post(url + '/v1/chat/completions', { model: 'gpt-4o-mini', max_tokens: 3, stream: true, messages: [{ role: 'user', content: 'hi' }] }, A);
    assert.equal(stream.status, 200, stream.text);
    assert.match(stream.text, /data: \[DONE\]/);
    assert.equal((await post(url + '/v1/completions', { model: 'gpt-4o-mini', prompt: 'hi', max_tokens: 2 }, A)).status, 200);
    // Lookups are of own keys only.
    const proto = await post(url + '/v1/chat/completions', { model: 'constructor', max_tokens: 2, messages: [{ role: 'user', content: 'hi' }] }, A);
    assert.equal(proto.status, 404);
    assert.equal(proto.json.error.code, 'model_not_found');

    const models = (await (await fetch(url + '/v1/models', { headers: A })).json()) as { data: Array<{ id: string; root?: string; pools: string[] }> };
    const alias = models.data.find((m) => m.id === 'gpt-4o-mini');
    assert.deepEqual([alias?.root, alias?.pools], [MODEL, ['main']]);
    assert.equal(models.data.find((m) => m.id === MODEL)?.root, undefined);
    const one = await fetch(url + '/v1/models/gpt-4o-mini', { headers: A });
    assert.equal(one.status, 200);
    assert.equal(((await one.json()) as { root: string }).root, MODEL);

    // A tenant limited to the model may use its alias too.
    assert.equal((await post(url + '/v1/completions', { model: 'gpt-4o-mini', prompt: 'hi', max_tokens: 2 }, { authorization: 'Bearer sk-tenant-b1' })).status, 200);

    const metrics = await (await fetch(url + '/metrics')).text();
    assert.equal(metricValue(metrics, 'kvgate_requests_total', { route: 'chat', model: MODEL, status: '200' }), 2);
    assert.equal(metricValue(metrics, 'kvgate_requests_total', { route: 'chat', model: 'gpt-4o-mini', status: '200' }), undefined);
  } finally {
    await gw.close();
    for (const s of sims) await s.close();
  }
});

test('an alias must name a served model and must not be one', () => {
  const base = { workers: [{ url: 'http://a:1', model: 'm' }, { url: 'http://b:1', model: 'n' }] };
  const problems = (aliases: Record<string, string>): string[] => {
    try {
      parseConfig({ ...base, aliases });
    } catch (e) {
      assert.ok(e instanceof ConfigError);
      return e.problems;
    }
    return [];
  };
  assert.deepEqual(problems({ small: 'm' }), []);
  assert.deepEqual(problems({ small: 'x' }), ["aliases.small: no pool serves model 'x'"]);
  assert.deepEqual(problems({ n: 'm' }), ["aliases.n: 'n' is a served model's own name"]);
});
