/**
 * The body of one tokenizer thread (hf-threads.ts): loads the `tokenizer.json` it is given and
 * answers `{ id, text, add }` with `{ id, ids }` (an Int32Array, transferred, not copied) or
 * `{ id, error }`. Posts `{ ready: true }` once loaded, `{ loadError }` if the file cannot be used.
 */
import { parentPort, workerData } from 'node:worker_threads';
import { loadHfTokenizer } from './hf.js';

export interface ThreadRequest {
  id: number;
  text: string;
  add: boolean | undefined;
}

export type ThreadReply = { id: number; ids: Int32Array } | { id: number; error: string } | { ready: true } | { loadError: string };

const port = parentPort!;
const { path, addSpecialTokens } = workerData as { path: string; addSpecialTokens?: boolean };

try {
  const tokenizer = await loadHfTokenizer(path, addSpecialTokens === undefined ? {} : { addSpecialTokens });
  port.on('message', (m: ThreadRequest) => {
    let reply: ThreadReply;
    try {
      reply = { id: m.id, ids: Int32Array.from(tokenizer.encode(m.text, m.add)) };
    } catch (e) {
      reply = { id: m.id, error: (e as Error).message };
    }
    if ('ids' in reply) port.postMessage(reply, [reply.ids.buffer as ArrayBuffer]);
    else port.postMessage(reply);
  });
  port.postMessage({ ready: true } satisfies ThreadReply);
} catch (e) {
  port.postMessage({ loadError: (e as Error).message } satisfies ThreadReply);
}
