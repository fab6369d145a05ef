/**
 * One generation request's HTTP exchange: its sequences (one per prompt and sample) and how their
 * outputs reach the client — SSE chunks as each engine step delivers tokens, or one JSON body at
 * the end — with vLLM's chunk shapes, usage accounting, stop handling (a stop string or stop token
 * id the engine does not know ends the sequence here) and endings: client gone (the sequences are
 * aborted in the engine) or server shutdown (an error event or a 503).
 *
 * Streams honour backpressure as a real server's bounded send buffer does: once the socket's
 * buffer is full (`write` returns false) nothing more is written until it drains; the tokens the
 * engine produces meanwhile are merged into the next chunk (as vLLM's output collector merges
 * deltas for a slow consumer), so a client that never reads costs a few KiB, not the whole output.
 */
import type { ServerResponse } from 'node:http';
import type { SampledLogprob } from '../../engine/synthetic-lm.js';
import type { FinishReason, FinishedOutput } from '../../engine/types.js';
import type { Generation } from './generation.js';
import { chatLogprobs, completionLogprobs, type PromptLogprobEntry } from './logprobs.js';
import { SimError, SSE_DONE, sendJson, sendJsonError, sseData, unavailable, usage } from './openai-protocol.js';
import type { GenParams, SeqSpec } from './request-spec.js';
import { ResponseEvents, responseObject, type ResponseState } from './responses-format.js';

/** What an exchange needs from the worker that runs it. */
export interface ExchangeHost {
  /** Served model name, the `model` of every answer. */
  readonly model: string;
  /** Start one sequence in the engine; its outputs come back through `ex.onOutput`. */
  submit(ex: Exchange, seq: SeqRun, params: GenParams): void;
  /** Abort a sequence's engine request (it ended on a stop string, or nobody waits for it any more). */
  cancelEngine(seq: SeqRun): void;
  recordFirstToken(seq: SeqRun, at: number): void;
  recordInterToken(seconds: number): void;
  recordFinished(seq: SeqRun, reason: FinishReason, at: number): void;
  /** The exchange is over: answered, or ended by a shutdown. */
  done(ex: Exchange): void;
  /** The client went away before the exchange was over. */
  clientGone(ex: Exchange): void;
  /** The synthetic LM's logprobs of the prompt tokens (for echo with logprobs). */
  promptLogprobs(promptIds: readonly number[], top: number): Array<SampledLogprob | null>;
  /** The same in the shape of vLLM's `prompt_logprobs` field. */
  vllmPromptLogprobs(promptIds: readonly number[], top: number): Array<PromptLogprobEntry | null>;
  /** Simulated time (ms). */
  now(): number;
}

/** One prompt's run through the engine. */
export interface SeqRun {
  index: number;
  engineId: string;
  spec: SeqSpec;
  gen: Generation;
  logprobs: SampledLogprob[] | null;
  cachedTokens: number;
  arrivalMs: number;
  startedMs: number | null;
  firstTokenMs: number | null;
  lastTokenMs: number;
  /** First streamed chunk not yet sent (chat: role chunk; completion: echo). */
  first: boolean;
  /** prompt_token_ids already streamed (return_token_ids). */
  sentPromptIds?: boolean;
}

/** An HTTP request in flight: its sequences and how their outputs are written. */
export class Exchange {
  private readonly host: ExchangeHost;
  private readonly res: ServerResponse;
  private readonly id: string;
  private readonly params: GenParams;
  /** The `model` of every answer: the adapter the request named, else the served model (as vLLM). */
  private readonly modelName: string;
  private readonly seqs: SeqRun[];
  private readonly created = Math.floor(Date.now() / 1000);
  private readonly object: string;
  private remaining: number;
  private ended = false;
  /** The socket's buffer is full: output waits (merged) until 'drain'. */
  private blocked = false;
  /** Sequences with output not yet written because of backpressure. */
  private readonly pending = new Set<SeqRun>();
  /** Every sequence finished while blocked: finish() runs on drain. */
  private finishPending = false;
  /** A Responses API request's answer (params.kind 'responses'), and its stream's events. */
  private readonly response: ResponseState | null;
  private events: ResponseEvents | null = null;
  /** A prefill for a remote decode: the kv_transfer_params its answer carries (sim/worker/kv-transfer.ts). */
  kvTransferParams: Record<string, unknown> | null = null;

  constructor(host: ExchangeHost, res: ServerResponse, id: string, params: GenParams, specs: SeqSpec[]) {
    this.host = host;
    this.res = res;
    this.id = id;
    this.params = params;
    this.modelName = params.lora ?? host.model;
    this.object = params.kind === 'chat' ? (params.stream ? 'chat.completion.chunk' : 'chat.completion') : 'text_completion';
    this.seqs = specs.map((spec, index) => ({
      index,
      engineId: `${id}-${index}`,
      spec,
      gen: undefined as unknown as Generation, // set by submit()
      logprobs: null,
      cachedTokens: 0,
      arrivalMs: 0,
      startedMs: null,
      firstTokenMs: null,
      lastTokenMs: 0,
      first: true,
    }));
    this.remaining = specs.length;
    this.response =
      params.kind === 'responses'
        ? {
            id,
            model: this.modelName,
            createdAt: this.created,
            instructions: params.responses?.instructions ?? null,
            maxOutputTokens: params.responses?.maxOutputTokens ?? null,
            temperature: params.temperature,
            topP: params.topP,
          }
        : null;
  }

  /** Bytes written but not yet taken by the client's socket (bounded by backpressure). */
  get bufferedBytes(): number {
    return this.res.writableLength;
  }

  start(): void {
    const res = this.res;
    res.on('close', () => {
      if (!this.ended) this.onClientGone();
    });
    if (this.params.stream) {
      res.writeHead(200, { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache', connection: 'keep-alive' });
      res.flushHeaders();
      if (this.response !== null) {
        this.events = new ResponseEvents(this.response, (text) => this.writeText(text));
        this.events.start();
      }
    }
    for (const seq of this.seqs) this.host.submit(this, seq, this.params);
  }

  onOutput(seq: SeqRun, tokens: readonly number[], fin: FinishedOutput | null, at: number): void {
    if (this.ended) return;
    const gen = seq.gen;
    if (tokens.length > 0) {
      if (seq.firstTokenMs === null) {
        seq.firstTokenMs = at;
        this.host.recordFirstToken(seq, at);
      } else {
        this.host.recordInterToken(Math.max(0, at - seq.lastTokenMs) / 1000);
      }
      seq.lastTokenMs = at;
    }
    const stopped = gen.append(tokens);
    if (stopped && !fin) this.host.cancelEngine(seq);
    if (fin) {
      gen.finish(fin.reason);
      seq.cachedTokens = fin.cachedPromptTokens;
    }
    if (this.params.stream) {
      if (this.blocked) this.pending.add(seq);
      else this.writeChunk(seq);
    }
    if (gen.finished) {
      this.host.recordFinished(seq, gen.finishReason!, at);
      if (--this.remaining === 0) {
        if (this.blocked) this.finishPending = true;
        else this.finish();
      }
    }
  }

  /** The client read what was buffered: write what was held back, merged, and finish if due. */
  private onDrain = (): void => {
    if (this.ended) return;
    this.blocked = false;
    for (const seq of [...this.pending]) {
      this.pending.delete(seq);
      this.writeChunk(seq);
      // Full again: the rest waits for the next drain.
      if (this.blocked) return;
    }
    if (this.finishPending) {
      this.finishPending = false;
      this.finish();
    }
  };

  // ---- streaming ----

  private writeChunk(seq: SeqRun): void {
    const gen = seq.gen;
    const delta = gen.takeDelta();
    const finished = gen.finished;
    const p = this.params;
    if (this.events !== null) {
      if (delta.text !== '') this.events.delta(delta.text);
      return;
    }
    if (p.kind === 'chat') {
      if (seq.first) {
        seq.first = false;
        this.write(this.chunk([{ index: seq.index, delta: { role: 'assistant', content: '' }, logprobs: null, finish_reason: null }]));
      }
      if (delta.text === '' && !finished && delta.numTokens === 0) return;
      if (delta.text === '' && !finished && p.logprobs === null) return;
      this.write(
        this.chunk([
          {
            index: seq.index,
            delta: { content: delta.text },
            logprobs: p.logprobs === null ? null : { content: chatLogprobs(seq.gen, delta.firstToken, delta.numTokens) },
            finish_reason: finished ? gen.finishReason : null,
            ...(finished ? { stop_reason: gen.stopReason } : {}),
          },
        ]),
      );
      return;
    }
    let text = delta.text;
    let logprobs: unknown = null;
    if (seq.first) {
      seq.first = false;
      if (p.echo) text = seq.spec.promptText + text;
      if (p.logprobs !== null) logprobs = this.completionLogprobs(seq, delta.firstToken, delta.numTokens, p.echo);
    } else if (p.logprobs !== null) {
      logprobs = this.completionLogprobs(seq, delta.firstToken, delta.numTokens, false);
    }
    if (text === '' && !finished && logprobs === null && !(p.returnTokenIds && delta.numTokens > 0)) return;
    const choice: Record<string, unknown> = {
      index: seq.index,
      text,
      logprobs,
      finish_reason: finished ? gen.finishReason : null,
      stop_reason: finished ? gen.stopReason : null,
    };
    if (p.returnTokenIds) {
      // vLLM: prompt_token_ids in a sequence's first chunk only, token_ids = this chunk's tokens.
      if (!seq.sentPromptIds) {
        seq.sentPromptIds = true;
        choice.prompt_token_ids = seq.spec.promptIds;
      }
      choice.token_ids = gen.tokens.slice(delta.firstToken, delta.firstToken + delta.numTokens);
    }
    this.write(this.chunk([choice]));
  }

  private chunk(choices: unknown[]): Record<string, unknown> {
    const c: Record<string, unknown> = { id: this.id, object: this.object, created: this.created, model: this.modelName, choices };
    if (this.params.continuousUsage) c.usage = this.usage();
    return c;
  }

  private write(obj: unknown): void {
    this.writeText(sseData(obj));
  }

  private writeText(text: string): void {
    if (!this.res.write(text) && !this.blocked) {
      this.blocked = true;
      this.res.once('drain', this.onDrain);
    }
  }

  // ---- completion ----

  private usage() {
    let prompt = 0;
    let completion = 0;
    let cached = 0;
    for (const s of this.seqs) {
      if (s.spec.sample === 0) prompt += s.spec.promptIds.length; // n samples share one prompt
      completion += s.gen.tokens.length;
      if (s.spec.sample === 0) cached += s.cachedTokens;
    }
    return usage(prompt, completion, cached);
  }

  private finish(): void {
    this.ended = true;
    this.host.done(this);
    const res = this.res;
    if (this.response !== null) {
      // One answer; max_output_tokens reached is vLLM's `incomplete` status.
      const gen = this.seqs[0]!.gen;
      const status = gen.finishReason === 'length' ? 'incomplete' : 'completed';
      if (this.events !== null) {
        this.events.end(status, gen.text, this.usage());
        res.end();
      } else {
        const response = this.response;
        this.sendWhole(() => responseObject(response, status, gen.text, this.usage()));
      }
      return;
    }
    if (this.params.stream) {
      if (this.params.includeUsage) {
        this.write({ id: this.id, object: this.object, created: this.created, model: this.modelName, choices: [], usage: this.usage() });
      }
      res.end(SSE_DONE);
      return;
    }
    this.sendWhole(() => (this.params.kind === 'chat' ? this.chatBody() : this.completionBody()));
  }

  /**
   * A non-streamed answer, built and sent whole. Called from the engine loop: an answer too large
   * to serialise (past V8's longest string, e.g. thousands of choices with logprobs) is a 500 for
   * this request, never an exception that ends the process.
   */
  private sendWhole(build: () => unknown): void {
    try {
      sendJson(this.res, 200, build());
    } catch (e) {
      if (!this.res.headersSent) sendJsonError(this.res, new SimError(500, 'InternalServerError', `the answer could not be serialised: ${e instanceof Error ? e.message : String(e)}`));
      else this.res.destroy();
    }
  }

  private chatBody(): unknown {
    const p = this.params;
    return {
      id: this.id,
      object: 'chat.completion',
      created: this.created,
      model: this.modelName,
      choices: this.seqs.map((s) => ({
        index: s.index,
        message: { role: 'assistant', reasoning_content: null, content: s.gen.text, tool_calls: [] },
        logprobs: p.logprobs === null ? null : { content: chatLogprobs(s.gen, 0, s.gen.tokens.length) },
        finish_reason: s.gen.finishReason,
        stop_reason: s.gen.stopReason,
      })),
      usage: this.usage(),
      prompt_logprobs: null,
      ...(this.kvTransferParams !== null ? { kv_transfer_params: this.kvTransferParams } : {}),
    };
  }

  private completionBody(): unknown {
    const p = this.params;
    return {
      id: this.id,
      object: 'text_completion',
      created: this.created,
      model: this.modelName,
      choices: this.seqs.map((s) => ({
        index: s.index,
        text: p.echo ? s.spec.promptText + s.gen.text : s.gen.text,
        logprobs: p.logprobs === null ? null : this.completionLogprobs(s, 0, s.gen.tokens.length, p.echo),
        finish_reason: s.gen.finishReason,
        stop_reason: s.gen.stopReason,
        prompt_logprobs: p.promptLogprobs === null ? null : this.host.vllmPromptLogprobs(s.spec.promptIds, p.promptLogprobs),
        ...(p.returnTokenIds ? { prompt_token_ids: s.spec.promptIds, token_ids: s.gen.tokens } : {}),
      })),
      usage: this.usage(),
      ...(this.kvTransferParams !== null ? { kv_transfer_params: this.kvTransferParams } : {}),
    };
  }

  // ---- logprobs ----

  /** Completion logprobs of output tokens [from, from + count), after the prompt's when `withPrompt`. */
  private completionLogprobs(seq: SeqRun, from: number, count: number, withPrompt: boolean): unknown {
    const ids = seq.spec.promptIds;
    const prompt = withPrompt ? { ids, logprobs: this.host.promptLogprobs(ids, this.params.logprobs ?? 0) } : null;
    // Offsets count from the start of the returned text, which begins with the prompt when echoed.
    const textBase = withPrompt || this.params.echo ? seq.spec.promptText.length : 0;
    return completionLogprobs(seq.gen, from, count, prompt, textBase, this.params.tokensAsIds);
  }

  // ---- endings ----

  private onClientGone(): void {
    this.ended = true;
    for (const s of this.seqs) {
      if (s.gen.finished) continue;
      this.host.cancelEngine(s);
      s.gen.finish('abort');
      this.host.recordFinished(s, 'abort', this.host.now());
    }
    this.host.clientGone(this);
  }

  abortForShutdown(): void {
    this.fail(unavailable('The server is shutting down.'));
  }

  /** End the request with an error: an error event in a stream, else the error's status and body. */
  fail(err: SimError): void {
    if (this.ended) return;
    this.ended = true;
    for (const s of this.seqs) if (!s.gen.finished) this.host.cancelEngine(s);
    this.host.done(this);
    if (this.params.stream) this.res.end(sseData(err.body()));
    else sendJsonError(this.res, err);
  }
}
