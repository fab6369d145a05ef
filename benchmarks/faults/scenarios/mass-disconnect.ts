/** 400 streaming clients disconnect mid-stream at once: no generation keeps running, nothing stays in flight. */
import { MODEL, metric, sleep, spawnSims, startGateway, Tally, type FaultScenario } from '../harness.js';

export const massDisconnect: FaultScenario = {
  name: 'mass-disconnect',
  description: '400 streams aborted by their clients after the first chunk',
  async run() {
    const sims = await spawnSims(2);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    const tally = new Tally();
    try {
      const controllers: AbortController[] = [];
      let firstChunks = 0;
      await Promise.all(
        Array.from({ length: 400 }, async (_, i) => {
          const ac = new AbortController();
          controllers.push(ac);
          const t0 = performance.now();
          try {
            const r = await fetch(url + '/v1/chat/completions', {
              method: 'POST',
              headers: { 'content-type': 'application/json' },
              body: JSON.stringify({ model: MODEL, stream: true, max_tokens: 2_000, messages: [{ role: 'user', content: `story ${i}` }] }),
              signal: ac.signal,
            });
            const reader = r.body!.getReader();
            await reader.read();
            firstChunks++;
            // The client got its answer started; leaving is its own choice, not a failure.
            tally.add({ kind: 'ok', detail: 'ok', status: r.status, ms: performance.now() - t0, end: performance.now(), text: '' });
            ac.abort();
          } catch (e) {
            tally.add({ kind: 'unanswered', detail: (e as Error).message, status: 0, ms: performance.now() - t0, end: performance.now(), text: '' });
          }
        }),
      );
      // Give the aborts a moment to reach the workers.
      let running = Infinity;
      for (let i = 0; i < 50 && (running > 0 || gw.inflight > 0); i++) {
        await sleep(100);
        running = 0;
        for (const s of sims) running += metric(await (await fetch(s.url + '/metrics')).text(), 'vllm:num_requests_running') ?? 0;
      }
      return {
        tally,
        figures: { 'streams started then abandoned': firstChunks, 'generations still running after': running, 'gateway in flight after': gw.inflight },
        checks: { 'no generation left running': running === 0, 'gateway in-flight back to 0': gw.inflight === 0 },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
