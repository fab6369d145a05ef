/**
 * A request that kills its worker (a prompt that crashes the engine): two workers that answer
 * everything, except that one seeing the poison prompt dies at once (drops the connection, stops
 * listening). Targets: the poison request gets a clear 502 (`upstream_worker_failed_on_request`)
 * and is not sent to the second worker, which stays up and serves everything after it.
 */
import { ask, MODEL, sleep, startGateway, Tally, type FaultScenario } from '../harness.js';
import { completionAnswer, startStandIn } from './standin-worker.js';

export const requestKillsWorker: FaultScenario = {
  name: 'request-kills-worker',
  description: 'a request kills the worker serving it alone; it must not be retried on the other',
  async run() {
    const workers = await Promise.all(
      [0, 1].map(() =>
        startStandIn((w, req, body, res) => {
          if (body.includes('POISON')) {
            req.socket.destroy();
            w.exit();
            return;
          }
          setTimeout(() => completionAnswer(res, MODEL), 20);
        }),
      ),
    );
    const { gw, url } = await startGateway(
      workers.map((w) => w.url),
      { retry: { attempts: 2 } },
    );
    try {
      const tally = new Tally();
      const normal = (i: number) => ({ path: '/v1/completions', body: { model: MODEL, prompt: `question ${i}`, max_tokens: 4 } });
      for (let i = 0; i < 4; i++) tally.add(await ask(url, normal(i)));
      const poison = await ask(url, { path: '/v1/completions', body: { model: MODEL, prompt: 'POISON: this prompt crashes the engine', max_tokens: 4 } });
      tally.add(poison);
      const poisonCode = (JSON.parse(poison.text || '{}') as { error?: { code?: string } }).error?.code ?? '-';
      const postsAfterPoison = workers.map((w) => w.posts());
      await sleep(300);
      let after = 0;
      for (let i = 0; i < 8; i++) {
        const o = await ask(url, normal(100 + i));
        tally.add(o);
        if (o.kind === 'ok') after++;
      }
      const alive = workers.filter((w) => !w.exited()).length;
      return {
        tally,
        figures: {
          'poison request: status code': `${poison.status} ${poisonCode}`,
          'workers up after it': alive,
          'requests answered after it (of 8)': after,
          'posts per worker when the poison was answered': postsAfterPoison.join(' '),
        },
        checks: {
          'the poison request got 502 upstream_worker_failed_on_request': poison.status === 502 && poisonCode === 'upstream_worker_failed_on_request',
          'the second worker stayed up': alive === 1,
          'every request after it answered': after === 8,
          'nothing left in flight': gw.router.openCount === 0,
        },
      };
    } finally {
      await gw.close();
      await Promise.all(workers.map((w) => w.close()));
    }
  },
};
