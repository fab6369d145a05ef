/**
 * Long prompts on healthy workers: two `kvgate sim --speed 1` workers, warmed with short streams,
 * then fresh streaming prompts of about 58,000 tokens, one after another. Each one keeps its worker
 * silent for its whole prefill (about 2 s); outlier detection must judge that silence against the
 * prefill the worker was sent, not a fixed time. Targets: every long prompt gets its first token
 * (200, a complete stream, on its first worker); no worker suspected; no breaker opened.
 */
import { ask, MODEL, sleep, spawnSims, startGateway, streamChat, type FaultScenario, Tally } from '../harness.js';

const WORDS = 'the of and to in is was for on that with as by at from his her they this had not are but one which have were all their there been has when who will more would about some into only other time could new these two may first then any like over such'.split(' ');

/** About `tokens` tokens of text no earlier request shares (common words: about one token each). */
function freshPrompt(seed: number, tokens: number): string {
  const words: string[] = [`request ${seed}:`];
  let x = seed * 2654435761 + 1;
  for (let i = 0; i < tokens; i++) {
    x = (x * 1103515245 + 12345) % 2147483648;
    words.push(WORDS[x % WORDS.length]!);
  }
  return words.join(' ');
}

export const longPrompt: FaultScenario = {
  name: 'long-prompt',
  description: 'fresh ~58,000-token streaming prompts on two healthy speed-1 workers',
  async run() {
    const sims = await spawnSims(2, ['--speed', '1']);
    // `kvgate serve`'s scrape and probe intervals: a scrape's answer is a byte from the worker too,
    // and the harness's faster scrapes would hide a silence the defaults leave.
    const { gw, url } = await startGateway(
      sims.map((s) => s.url),
      { scrape: { intervalMs: 1_000 }, health: { intervalMs: 2_000 } },
    );
    try {
      const tally = new Tally();
      for (let i = 0; i < 24; i++) tally.add(await ask(url, streamChat(i % 2, i, 8)));
      const warmAllowance = gw.registry.workers.map((w) => Math.round(gw.outliers?.allowanceMs(w) ?? 0)).join(' ');
      const long: Array<{ status: number; ms: number; ttftMs: number; detail: string }> = [];
      for (let i = 0; i < 3; i++) {
        const t0 = performance.now();
        let ttftMs = -1;
        let status = 0;
        let text = '';
        try {
          const r = await fetch(url + '/v1/chat/completions', {
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 8, messages: [{ role: 'user', content: freshPrompt(1000 + i, 58_000) }] }),
            signal: AbortSignal.timeout(60_000),
          });
          status = r.status;
          for await (const chunk of r.body!) {
            if (ttftMs < 0) ttftMs = performance.now() - t0;
            text += Buffer.from(chunk as Uint8Array).toString();
          }
        } catch (e) {
          text = `client: ${(e as Error).message}`;
        }
        const ms = performance.now() - t0;
        const kind = status === 200 && text.includes('data: [DONE]') ? 'ok' : 'error';
        const detail = kind === 'ok' ? 'ok' : `${status} ${/"message":"([^"]*)"/.exec(text)?.[1] ?? text.slice(0, 120)}`;
        tally.add({ kind, detail, status, ms, end: performance.now(), text });
        long.push({ status, ms, ttftMs, detail });
        await sleep(200);
      }
      const workers = gw.registry.workers;
      const suspicions = workers.filter((w) => w.suspected).length;
      const opened = workers.filter((w) => w.circuitOpen).map((w) => w.id);
      const m = await (await fetch(url + '/metrics')).text();
      const suspectedTotal = [...m.matchAll(/^kvgate_worker_suspected_total\{[^}]*\} (\S+)/gm)].reduce((a, x) => a + Number(x[1]), 0);
      return {
        tally,
        figures: {
          'long prompts: status (first token ms)': long.map((l) => `${l.status} (${Math.round(l.ttftMs)})`).join(' '),
          'silence allowed after the warm-up, per worker (ms)': warmAllowance,
          'silence allowed now, per worker (ms)': workers.map((w) => Math.round(gw.outliers?.allowanceMs(w) ?? 0)).join(' '),
          'suspicions (kvgate_worker_suspected_total)': suspectedTotal,
          'breakers open': opened.join(' ') || 'none',
        },
        checks: {
          'every long prompt got its first token and a complete stream': long.every((l) => l.detail === 'ok' && l.ttftMs > 0),
          'no worker suspected': suspectedTotal === 0 && suspicions === 0,
          'no breaker opened': opened.length === 0,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
