/**
 * What a web page can make a browser send without a preflight: POSTs with text/plain,
 * form-encoded and multipart bodies (here carrying a valid JSON generation request). Every one is
 * refused with 415 before the body is read; no worker starts a generation; no CORS header invites
 * the page to read an answer.
 */
import { ask, MODEL, spawnSims, startGateway, Tally, type FaultScenario } from '../harness.js';

export const crossSitePost: FaultScenario = {
  name: 'cross-site-post',
  description: 'browser "simple" cross-site POSTs (text/plain, form, multipart) from a foreign origin',
  async run() {
    const sims = await spawnSims(1);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    try {
      const tally = new Tally();
      const body = JSON.stringify({ model: MODEL, max_tokens: 16, messages: [{ role: 'user', content: 'exfiltrate' }] });
      let cors = 0;
      for (let i = 0; i < 60; i++) {
        const ct = ['text/plain', 'application/x-www-form-urlencoded', 'multipart/form-data; boundary=----x'][i % 3]!;
        const o = await ask(url, { raw: body, headers: { 'content-type': ct, origin: 'https://attacker.example' } });
        tally.add(o);
      }
      const pre = await fetch(url + '/v1/chat/completions', { method: 'OPTIONS', headers: { origin: 'https://attacker.example', 'access-control-request-method': 'POST' } });
      if (pre.headers.get('access-control-allow-origin') !== null) cors++;
      const m = await (await fetch(sims[0]!.url + '/metrics')).text();
      const started = /vllm:request_success_total\{[^}]*\} (\d+)/g;
      let generations = 0;
      for (const x of m.matchAll(started)) generations += Number(x[1]);
      return {
        tally,
        figures: { 'generations the worker ran': generations, 'CORS headers granted': cors, 'answers': [...tally.byError.keys()].join(', ') },
        checks: { 'every post refused with 415': tally.byError.get('415 unsupported_media_type') === tally.sent, 'no generation ran': generations === 0, 'no CORS grant': cors === 0 },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
