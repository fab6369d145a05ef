/**
 * Bodies nesting 100,000 arrays in a field kvgate does not know, sent on the requests the gateway
 * re-serialises or canonicalises: a tenant-isolated pool (the cache salt is written into the
 * body), an alias, a vLLM priority, the response cache's key. Each is refused with 400
 * `nesting_too_deep` before anything is charged: no worker is left with a request in flight, a
 * sheddable tenant's small request is served afterwards, and shutdown does not wait for leaked
 * reservations.
 */
import { ask, MODEL, spawnSims, startGateway, Tally, type FaultScenario } from '../harness.js';

const DEPTH = 100_000;
const ADMIN = 'sk-admin-nested-01';

export const nestedBodies: FaultScenario = {
  name: 'nested-bodies',
  description: '60 bodies nested 100,000 deep on isolated, aliased, prioritised, cacheable requests',
  async run() {
    const sims = await spawnSims(3);
    const { gw, url } = await startGateway([], {
      pools: [{ name: 'main', model: MODEL, cacheIsolation: 'tenant', workers: sims.map((s, i) => ({ url: s.url, id: `w${i}` })) }],
      tenants: [
        { id: 'acme', keys: [{ value: 'sk-acme-nested-01' }] },
        { id: 'batch', keys: [{ value: 'sk-batch-nested-1' }], priority: 'sheddable' },
      ],
      admin: { keys: [{ value: ADMIN }] },
      aliases: { 'gpt-4o-mini': MODEL },
      admission: { vllmPriority: { pools: ['main'], values: { critical: -10, standard: 0, sheddable: 10 } } },
      cache: { enabled: true },
    });
    let closed = false;
    try {
      const nest = `${'['.repeat(DEPTH)}${']'.repeat(DEPTH)}`;
      const acme = { authorization: 'Bearer sk-acme-nested-01' };
      const batch = { authorization: 'Bearer sk-batch-nested-1' };
      const kinds = [
        { path: '/v1/chat/completions', raw: `{"model":"${MODEL}","temperature":0,"max_tokens":8,"messages":[{"role":"user","content":"hi"}],"x":${nest}}` },
        { path: '/v1/chat/completions', raw: `{"model":"gpt-4o-mini","max_tokens":8,"messages":[{"role":"user","content":"hi"}],"x":${nest}}` },
        { path: '/v1/completions', raw: `{"model":"${MODEL}","temperature":0,"prompt":"hi","x":${nest}}` },
        { path: '/v1/embeddings', raw: `{"model":"${MODEL}","input":"hi","x":${nest}}` },
      ];
      const nested = new Tally();
      for (let i = 0; i < 60; i++) {
        const k = kinds[i % kinds.length]!;
        nested.add(await ask(url, { path: k.path, raw: k.raw, headers: i % 2 === 0 ? acme : batch }));
      }
      const workers = (await (await fetch(url + '/admin/workers', { headers: { authorization: `Bearer ${ADMIN}` } })).json()) as Array<{ inflight: number }>;
      const inflight = workers.reduce((n, w) => n + w.inflight, 0);
      const small = new Tally();
      for (let i = 0; i < 5; i++) {
        small.add(await ask(url, { body: { model: MODEL, max_tokens: 64, messages: [{ role: 'user', content: `a small ask ${i}` }] }, headers: batch }));
      }
      const tally = new Tally();
      tally.merge(nested);
      tally.merge(small);
      const t0 = performance.now();
      await gw.close();
      closed = true;
      const shutdownMs = Math.round(performance.now() - t0);
      return {
        tally,
        figures: {
          'nested bodies / refused 400 nesting_too_deep': `${nested.sent} / ${nested.byError.get('400 nesting_too_deep') ?? 0}`,
          'in flight on the workers after': inflight,
          "sheddable tenant's 64-token asks ok": `${small.ok} / ${small.sent}`,
          'shutdown (ms)': shutdownMs,
        },
        checks: {
          'every nested body refused with 400': nested.byError.get('400 nesting_too_deep') === nested.sent,
          'nothing left in flight': inflight === 0,
          'sheddable small requests served': small.ok === small.sent,
          'shutdown under 2 s': shutdownMs < 2_000,
        },
      };
    } finally {
      if (!closed) await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
