/**
 * Huge /v1/embeddings requests: 100,000 inputs in one body (~700 KB, under the body limit), inputs
 * summing past the token cap, and one input that is within the gateway's caps but longer than the
 * workers' context. The gateway refuses the first two with 400 before any worker is asked; the
 * worker refuses the third with vLLM's 400, relayed once; no worker process dies, and normal
 * embeddings keep being served.
 */
import { ask, MODEL, spawnSims, startGateway, Tally, type FaultScenario } from '../harness.js';

/** The workers' context, lowered so the over-long input stays small. */
const MAX_MODEL_LEN = 2_048;

export const embeddingsFlood: FaultScenario = {
  name: 'embeddings-flood',
  description: '100,000-input and over-long /v1/embeddings requests beside normal ones',
  async run() {
    const sims = await spawnSims(2, ['--max-model-len', String(MAX_MODEL_LEN)]);
    const { gw, url } = await startGateway(sims.map((s) => s.url));
    try {
      const path = '/v1/embeddings';
      const tally = new Tally();
      const flood = new Tally();
      const tooManyTokens = new Tally();
      const tooLong = new Tally();
      const normal = new Tally();
      const floodBody = JSON.stringify({ model: MODEL, input: Array.from({ length: 100_000 }, (_, i) => `w${i % 997}`) });
      // 2,000 inputs (the cap is 2,048) of 200 token ids: 400,000 tokens, over the 300,000 cap.
      const manyTokens = { model: MODEL, input: Array.from({ length: 2_000 }, (_, i) => Array.from({ length: 200 }, (_, j) => 100 + ((i + j) % 5_000))) };
      const overLong = { model: MODEL, input: Array.from({ length: MAX_MODEL_LEN + 500 }, (_, j) => 100 + (j % 5_000)) };
      let workerMessage = '';
      for (let round = 0; round < 3; round++) {
        flood.add(await ask(url, { path, raw: floodBody }));
        tooManyTokens.add(await ask(url, { path, body: manyTokens }));
        const o = await ask(url, { path, body: overLong });
        tooLong.add(o);
        if (o.kind === 'error') workerMessage = (JSON.parse(o.text) as { error: { message: string } }).error.message;
        for (let i = 0; i < 5; i++) normal.add(await ask(url, { path, body: { model: MODEL, input: [`normal text ${round} ${i}`, 'another one'] } }));
      }
      for (const t of [flood, tooManyTokens, tooLong, normal]) tally.merge(t);
      const alive = sims.filter((s) => s.proc.exitCode === null && s.proc.signalCode === null).length;
      const workers = (await (await fetch(url + '/admin/workers')).json()) as Array<{ inflight: number }>;
      const inflight = workers.reduce((n, w) => n + w.inflight, 0);
      return {
        tally,
        figures: {
          '100,000-input asks / refused 400 limit_exceeded': `${flood.sent} / ${flood.byError.get('400 limit_exceeded') ?? 0}`,
          '400,000-token asks / refused 400 limit_exceeded': `${tooManyTokens.sent} / ${tooManyTokens.byError.get('400 limit_exceeded') ?? 0}`,
          'over-context inputs / refused 400 by the worker': `${tooLong.sent} / ${tooLong.errors}`,
          "worker's message": workerMessage.slice(0, 100),
          'normal embeddings ok': `${normal.ok} / ${normal.sent}`,
          'worker processes alive': `${alive} / ${sims.length}`,
          'in flight after': inflight,
        },
        checks: {
          'every flood refused with 400 by the gateway': flood.byError.get('400 limit_exceeded') === flood.sent,
          'every token-heavy ask refused with 400 by the gateway': tooManyTokens.byError.get('400 limit_exceeded') === tooManyTokens.sent,
          'every over-context input refused with 400 (the worker\'s words)': tooLong.errors === tooLong.sent && /in the input for embedding generation/.test(workerMessage),
          'normal embeddings all OK': normal.ok === normal.sent,
          'no worker died': alive === sims.length,
          'nothing left in flight': inflight === 0,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(sims.map((s) => s.stop()));
    }
  },
};
