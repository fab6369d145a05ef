/**
 * `hf:` tokenizers off the event loop: worker threads that each load the same `tokenizer.json`
 * and encode long prompts, so that a prompt of thousands of tokens (milliseconds of Tokenizers.js)
 * does not hold up every other request the gateway is serving. With OpenLLaMA's tokenizer a
 * 36,000-character prompt costs the event loop 0.1–0.5 ms this way against 14–30 ms encoded in
 * place (docs/performance.md, "Long prompts tokenized on a thread").
 *
 * A request goes to the thread with the fewest prompts waiting. A thread that dies (an uncaught
 * error, running out of memory) or spends longer than `timeoutMs` on one prompt (a pathological
 * text) is ended: what it held is rejected with a ThreadLostError, and it is started again after
 * a pause. While no thread runs, encode() rejects at once with a plain Error. Callers then
 * tokenize another way (registry.ts): never lost.
 */
import { Worker } from 'node:worker_threads';
import type { ThreadReply, ThreadRequest } from './hf-thread-main.js';

const THREAD_MAIN = new URL('./hf-thread-main.js', import.meta.url);
/** Pause before starting a dead thread again; doubled per failed start in a row, up to the cap. */
const RESTART_MS = 1_000;
const RESTART_CAP_MS = 30_000;

/** The prompt was handed to a thread that died or timed out holding it. */
export class ThreadLostError extends Error {}

/** Longest a thread may spend on one prompt by default (an 8,000-token prompt takes 14–30 ms with a Llama tokenizer). */
const THREAD_TIMEOUT_MS = 10_000;

/**
 * The heap a thread may grow to by default, MB. A Llama tokenizer and a prompt at the body-size
 * limit take about 60 MB; a thread that outgrows this is ended (and started again) alone, where an
 * unbounded one could take the gateway's memory with it.
 */
const THREAD_HEAP_MB = 512;

export interface HfThreadsOptions {
  /** The tokenizer.json every thread loads. */
  path: string;
  threads: number;
  /** Longest a thread may spend on one prompt before it is ended (default THREAD_TIMEOUT_MS). */
  timeoutMs?: number;
  addSpecialTokens?: boolean;
  /** The heap each thread may grow to, MB (default THREAD_HEAP_MB). */
  heapMb?: number;
  /** Told when a thread died (its pending prompts are tokenized by the callers instead). */
  onExit?: (message: string) => void;
}

interface Waiter {
  resolve(ids: Int32Array): void;
  reject(e: Error): void;
}

class Slot {
  worker: Worker | null = null;
  ready = false;
  /** Failures in a row (the restart pause doubles with each). */
  failures = 0;
  /** Prompts handed over, in order: the thread answers them first in, first out. */
  readonly waiting = new Map<number, Waiter>();
  /** When the thread began the prompt it is working on (the oldest waiting), ms. */
  busySince = 0;
  /** Set when the watchdog ended the thread: why its prompts are rejected. */
  timedOut = false;
  /** What the thread died of, when it reported it ('error' comes before 'exit'). */
  died: string | null = null;
}

export class HfTokenizerThreads {
  private readonly slots: Slot[] = [];
  private nextId = 1;
  private closed = false;
  /** Threads started again after one died. */
  restarts = 0;

  private readonly timeoutMs: number;
  private watchdog: NodeJS.Timeout | null = null;

  private constructor(private readonly o: HfThreadsOptions) {
    this.timeoutMs = o.timeoutMs ?? THREAD_TIMEOUT_MS;
  }

  /** Start the threads; rejects (and stops them) if the file cannot be loaded in a thread. */
  static async start(o: HfThreadsOptions): Promise<HfTokenizerThreads> {
    const pool = new HfTokenizerThreads(o);
    for (let i = 0; i < o.threads; i++) pool.slots.push(new Slot());
    try {
      await Promise.all(pool.slots.map((s) => pool.spawn(s)));
    } catch (e) {
      await pool.close();
      throw e;
    }
    return pool;
  }

  /** The ids of `text`; rejects if no thread can take it now, or the thread died holding it. */
  encode(text: string, addSpecialTokens?: boolean): Promise<Int32Array> {
    let best: Slot | null = null;
    for (const s of this.slots) if (s.ready && (best === null || s.waiting.size < best.waiting.size)) best = s;
    if (best === null) return Promise.reject(new Error(this.closed ? 'the tokenizer threads are closed' : 'no tokenizer thread is running'));
    const slot = best;
    const id = this.nextId++;
    if (slot.waiting.size === 0) slot.busySince = performance.now();
    this.watch();
    return new Promise<Int32Array>((resolve, reject) => {
      slot.waiting.set(id, { resolve, reject });
      slot.worker!.postMessage({ id, text, add: addSpecialTokens } satisfies ThreadRequest);
    });
  }

  /** Prompts handed to a thread and not answered yet. */
  get pending(): number {
    let n = 0;
    for (const s of this.slots) n += s.waiting.size;
    return n;
  }

  /** Threads running now. */
  get running(): number {
    return this.slots.filter((s) => s.ready).length;
  }

  /** Stop every thread; what they still held is rejected. */
  async close(): Promise<void> {
    this.closed = true;
    if (this.watchdog !== null) clearInterval(this.watchdog);
    this.watchdog = null;
    await Promise.all(this.slots.map(async (s) => { await s.worker?.terminate(); }));
  }

  /**
   * While any thread holds a prompt, check a few times per timeout whether one has been on the
   * same prompt for longer than the timeout, and end it. Stops itself once every thread is idle.
   */
  private watch(): void {
    if (this.watchdog !== null) return;
    this.watchdog = setInterval(() => {
      const now = performance.now();
      let busy = false;
      for (const s of this.slots) {
        if (s.waiting.size === 0 || !s.ready) continue;
        busy = true;
        if (now - s.busySince > this.timeoutMs) {
          // Out of service at once: nothing more is handed to a thread that is being ended.
          s.timedOut = true;
          s.ready = false;
          void s.worker?.terminate();
        }
      }
      if (!busy && this.watchdog !== null) {
        clearInterval(this.watchdog);
        this.watchdog = null;
      }
    }, Math.max(5, Math.min(1_000, this.timeoutMs / 4)));
    this.watchdog.unref();
  }

  private spawn(slot: Slot): Promise<void> {
    const w = new Worker(THREAD_MAIN, {
      workerData: { path: this.o.path, addSpecialTokens: this.o.addSpecialTokens },
      resourceLimits: { maxOldGenerationSizeMb: this.o.heapMb ?? THREAD_HEAP_MB },
    });
    // An idle thread does not keep the process alive; the gateway's server does while it runs.
    w.unref();
    slot.worker = w;
    return new Promise<void>((resolve, reject) => {
      w.on('message', (m: ThreadReply) => {
        if ('id' in m) {
          const waiter = slot.waiting.get(m.id);
          if (waiter === undefined) return;
          slot.waiting.delete(m.id);
          // The next prompt in its queue starts now.
          slot.busySince = performance.now();
          if ('ids' in m) waiter.resolve(m.ids);
          else waiter.reject(new Error(m.error));
        } else if ('ready' in m) {
          slot.ready = true;
          slot.failures = 0;
          resolve();
        } else {
          reject(new Error(m.loadError));
          void w.terminate();
        }
      });
      // 'error' (an uncaught exception in the thread, or ERR_WORKER_OUT_OF_MEMORY past its heap
      // bound) is followed by 'exit'; the listener keeps it from being thrown in the gateway.
      w.on('error', (e) => {
        slot.died = (e as NodeJS.ErrnoException).code ?? e.message;
        reject(e);
      });
      w.on('exit', (code) => {
        const wasReady = slot.ready || slot.timedOut;
        slot.ready = false;
        slot.worker = null;
        const why = new ThreadLostError(
          slot.timedOut
            ? `the tokenizer thread spent over ${this.timeoutMs} ms on one prompt and was ended`
            : `the tokenizer thread exited (code ${code}${slot.died !== null ? `: ${slot.died}` : ''})`,
        );
        slot.timedOut = false;
        slot.died = null;
        for (const waiter of slot.waiting.values()) waiter.reject(why);
        slot.waiting.clear();
        reject(why);
        if (this.closed) return;
        this.o.onExit?.(why.message);
        if (!wasReady) slot.failures++;
        const pause = Math.min(RESTART_CAP_MS, RESTART_MS * 2 ** Math.min(slot.failures, 5));
        setTimeout(() => {
          if (this.closed) return;
          this.restarts++;
          this.spawn(slot).catch(() => {
            // It failed to start again: the exit handler has scheduled the next try.
          });
        }, pause).unref();
      });
    });
  }
}
