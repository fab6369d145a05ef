import assert from 'node:assert/strict';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, describe, it } from 'node:test';
import { azureSource, burstgptSource, jsonlSource, loadTrace, mooncakeSource, parseAzureTimestamp, TraceError } from '../../src/workload/loaders.js';
import { readLineAt, readLines } from '../../src/workload/line-reader.js';
import { expandSessions } from '../../src/workload/sessions.js';
import { answerTokens, synthText } from '../../src/workload/tokens.js';
import { estimateTokenizer, renderChat } from '../../src/tokenizer/index.js';

const dir = mkdtempSync(join(tmpdir(), 'kvgate-loaders-'));
after(() => rmSync(dir, { recursive: true, force: true }));
let n = 0;
function file(text: string, ext = 'jsonl'): string {
  const p = join(dir, `t${n++}.${ext}`);
  writeFileSync(p, text);
  return p;
}

const slice = (a: ArrayLike<number>, from: number, to: number) => Array.from(a).slice(from, to);

describe('line reader', () => {
  it('reads lines across chunk boundaries, CRLF and a last line without newline', () => {
    const p = file('alpha\r\nbeta\n\ngamma-delta\nlast', 'txt');
    const lines = [...readLines(p, 4)].map(({ no, text }) => ({ no, text }));
    assert.deepEqual(lines, [
      { no: 1, text: 'alpha' },
      { no: 2, text: 'beta' },
      { no: 3, text: '' },
      { no: 4, text: 'gamma-delta' },
      { no: 5, text: 'last' },
    ]);
  });

  it('gives each line’s byte offset and length, so readLineAt reads it back (multibyte text, CRLF)', () => {
    const p = file('héllo\r\nwörld ✓\n\nlast', 'txt');
    const lines = [...readLines(p, 3)];
    assert.deepEqual(lines.map((l) => [l.offset, l.bytes]), [[0, 6], [8, 10], [19, 0], [20, 4]]);
    for (const l of lines) assert.equal(readLineAt(p, l.offset, l.bytes), l.text);
  });
});

describe('mooncake loader', () => {
  const rows = [
    { timestamp: 0, input_length: 1100, output_length: 5, hash_ids: [1, 2, 3] },
    { timestamp: 0, input_length: 700, output_length: 2, hash_ids: [1, 9] },
    { timestamp: 40, input_length: 1536, output_length: 7, hash_ids: [4, 2, 3] },
    { timestamp: 41, input_length: 1100, output_length: 3, hash_ids: [1, 2, 3] },
  ];
  const path = file(rows.map((r) => JSON.stringify(r)).join('\n') + '\n');

  it('parses rows with lengths and arrival times', () => {
    const reqs = [...mooncakeSource(path).open()];
    assert.deepEqual(reqs.map((r) => r.arrivalMs), [0, 0, 40, 41]);
    assert.deepEqual(reqs.map((r) => r.promptTokens.length), [1100, 700, 1536, 1100]);
    assert.deepEqual(reqs.map((r) => r.maxTokens), [5, 2, 7, 3]);
  });

  it('equal hash ids at equal positions give identical 512-token blocks, different ids differ', () => {
    const [a, b, c, d] = [...mooncakeSource(path).open()].map((r) => r.promptTokens);
    assert.deepEqual(slice(a!, 0, 512), slice(b!, 0, 512)); // id 1 shared
    assert.notDeepEqual(slice(a!, 512, 1024), slice(b!, 512, 700)); // 2 vs 9
    assert.notDeepEqual(slice(a!, 0, 512), slice(c!, 0, 512)); // 1 vs 4
    // The same rows produce the same tokens: the whole prompt of row 4 equals row 1.
    assert.deepEqual(Array.from(a!), Array.from(d!));
    // The last block is partial: row 1's third block is the first 76 tokens of id 3's block.
    assert.deepEqual(slice(a!, 1024, 1100), slice(c!, 1024, 1100));
    // Equal token prefixes give equal text prefixes for character-based policies.
    const ta = synthText(slice(a!, 0, 512));
    assert.ok(synthText(b!).startsWith(ta));
  });

  it('is deterministic per seed and differs across seeds', () => {
    const one = [...mooncakeSource(path, { seed: 1 }).open()][0]!.promptTokens;
    const again = [...mooncakeSource(path, { seed: 1 }).open()][0]!.promptTokens;
    const other = [...mooncakeSource(path, { seed: 2 }).open()][0]!.promptTokens;
    assert.deepEqual(Array.from(one), Array.from(again));
    assert.notDeepEqual(Array.from(one), Array.from(other));
  });

  it('names the file and line of a bad row', () => {
    const bad = file(
      [
        JSON.stringify(rows[0]),
        '',
        JSON.stringify({ timestamp: 5, input_length: 0, output_length: 2, hash_ids: [] }),
      ].join('\n'),
    );
    assert.throws(
      () => [...mooncakeSource(bad).open()],
      (e: unknown) => e instanceof TraceError && e.line === 3 && /:3: "input_length" must be an integer/.test(e.message),
    );
  });

  it('skips and counts bad rows with skipBad', () => {
    const bad = file(
      [
        JSON.stringify(rows[0]),
        '{not json',
        JSON.stringify({ timestamp: 5, input_length: 10, output_length: 2, hash_ids: ['x'] }),
        JSON.stringify({ timestamp: 5, input_length: 10, output_length: 2, hash_ids: [0] }),
        JSON.stringify({ timestamp: 1, input_length: 10, output_length: 2, hash_ids: [0] }), // goes backwards
        '[1,2]',
      ].join('\n'),
    );
    const src = mooncakeSource(bad, { skipBad: true });
    const got = [...src.open()];
    assert.equal(got.length, 2);
    assert.equal(src.skipped, 4);
    assert.throws(() => [...mooncakeSource(bad).open()], /:2: invalid JSON/);
  });
});

describe('azure loader', () => {
  const csv = [
    'TIMESTAMP,ContextTokens,GeneratedTokens',
    '2023-11-16 18:15:46.6805900,374,44',
    '2023-11-16 18:15:50.9951690,396,109',
    '2023-11-16 18:16:46.6805900,1000,1',
  ].join('\n');
  const path = file(csv + '\n', 'csv');

  it('parses timestamps to ms from the first row', () => {
    const gap = parseAzureTimestamp('2023-11-16 18:15:50.9951690') - parseAzureTimestamp('2023-11-16 18:15:46.6805900');
    assert.ok(Math.abs(gap - 4314.579) < 1e-3, String(gap));
    assert.ok(Number.isNaN(parseAzureTimestamp('16/11/2023 18:15')));
    const reqs = [...azureSource(path).open()];
    assert.equal(reqs.length, 3);
    assert.equal(reqs[0]!.arrivalMs, 0);
    assert.ok(Math.abs(reqs[1]!.arrivalMs - 4314.579) < 1e-3);
    assert.ok(Math.abs(reqs[2]!.arrivalMs - 60000) < 1e-3);
    assert.deepEqual(reqs.map((r) => [r.promptTokens.length, r.maxTokens]), [[374, 44], [396, 109], [1000, 1]]);
    // No prefix information: prompts share nothing.
    assert.notDeepEqual(slice(reqs[0]!.promptTokens, 0, 16), slice(reqs[1]!.promptTokens, 0, 16));
  });

  it('adds synthetic shared prefixes on request', () => {
    const reqs = [...azureSource(path, { sharedPrefix: { tokens: 300, groups: 1 } }).open()];
    assert.deepEqual(slice(reqs[0]!.promptTokens, 0, 300), slice(reqs[1]!.promptTokens, 0, 300));
    assert.notDeepEqual(slice(reqs[0]!.promptTokens, 300, 310), slice(reqs[1]!.promptTokens, 300, 310));
    const frac = [...azureSource(path, { sharedPrefix: { fraction: 0.5, groups: 1 } }).open()];
    assert.deepEqual(slice(frac[2]!.promptTokens, 0, 187), slice(frac[0]!.promptTokens, 0, 187));
  });

  it('reports bad rows by line and counts skips', () => {
    const bad = file(csv + '\n2023-11-16 18:17:00.0,abc,5\nnot,a,timestamp\n2023-11-16 18:18:00.0,10\n', 'csv');
    assert.throws(() => [...azureSource(bad).open()], (e: unknown) => e instanceof TraceError && e.line === 5 && /ContextTokens/.test(e.message));
    const src = azureSource(bad, { skipBad: true });
    assert.equal([...src.open()].length, 3);
    assert.equal(src.skipped, 3);
  });
});

describe('burstgpt loader', () => {
  const csv = [
    'Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type',
    '5,ChatGPT,472,18,490,Conversation log',
    '45,ChatGPT,1087,0,1087,Conversation log',
    '118.5,GPT-4,417,276,693,API log',
  ].join('\n');
  const path = file(csv + '\n', 'csv');

  it('reads its columns by name, seconds as ms from the first row, and leaves out failed requests', () => {
    const src = burstgptSource(path);
    const reqs = [...src.open()];
    assert.deepEqual(reqs.map((r) => [r.arrivalMs, r.promptTokens.length, r.maxTokens]), [[0, 472, 18], [113_500, 417, 276]]);
    assert.equal(src.skipped, 1, 'the row with 0 response tokens');
    assert.equal(loadTrace(path, 'burstgpt').name, `burstgpt:${path.split('/').pop()}`);
    // Columns in another order are read the same; shared prefixes as for Azure.
    const moved = file('Log Type,Response tokens,Request tokens,Timestamp\nAPI log,18,472,5\nAPI log,276,417,118.5\n', 'csv');
    assert.deepEqual([...burstgptSource(moved).open()].map((r) => [r.arrivalMs, r.promptTokens.length, r.maxTokens]), [[0, 472, 18], [113_500, 417, 276]]);
    const shared = [...burstgptSource(path, { sharedPrefix: { tokens: 300, groups: 1 } }).open()];
    assert.deepEqual(slice(shared[0]!.promptTokens, 0, 300), slice(shared[1]!.promptTokens, 0, 300));
  });

  it("with Session ID, a turn's prompt begins with its session's previous prompt when it is as long", () => {
    const sessions = file(
      [
        'Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,Log Type',
        '1,s-a,2.0,ChatGPT,200,50,250,Conversation log',
        '2,s-b,2.0,ChatGPT,200,50,250,Conversation log',
        '9,s-a,2.0,ChatGPT,300,40,340,Conversation log',
        '12,s-a,2.0,ChatGPT,120,40,160,Conversation log',
        '15,,2.0,ChatGPT,200,40,240,API log',
      ].join('\n') + '\n',
      'csv',
    );
    const [a1, b1, a2, a3, none] = [...burstgptSource(sessions).open()].map((r) => r.promptTokens);
    assert.deepEqual(slice(a2!, 0, 200), slice(a1!, 0, 200), 'the second turn carries the first as its history');
    assert.notDeepEqual(slice(a2!, 200, 216), slice(b1!, 0, 16));
    assert.notDeepEqual(slice(b1!, 0, 16), slice(a1!, 0, 16), 'another session shares nothing');
    assert.notDeepEqual(slice(a3!, 0, 16), slice(a1!, 0, 16), 'a shorter turn (history cut) is a prompt of its own');
    assert.notDeepEqual(slice(none!, 0, 16), slice(a1!, 0, 16));
  });

  it('reports a missing column or a bad row by line', () => {
    const noHeader = file('5,ChatGPT,472,18,490,Conversation log\n', 'csv');
    assert.throws(() => [...burstgptSource(noHeader).open()], (e: unknown) => e instanceof TraceError && e.line === 1 && /Request tokens/.test(e.message));
    const bad = file(csv + '\nsoon,ChatGPT,10,5,15,API log\n130,ChatGPT,10,5\n', 'csv');
    assert.throws(() => [...burstgptSource(bad).open()], (e: unknown) => e instanceof TraceError && e.line === 5 && /Timestamp/.test(e.message));
    const src = burstgptSource(bad, { skipBad: true });
    assert.equal([...src.open()].length, 2);
    assert.equal(src.skipped, 3);
  });
});

describe('kvgate jsonl loader', () => {
  it('reads text prompts, chat messages and token prompts with metadata', () => {
    const messages = [
      { role: 'system', content: 'You are helpful.' },
      { role: 'user', content: 'Hello there' },
    ];
    const path = file(
      [
        JSON.stringify({ timestamp_ms: 0, prompt: 'the cache of the worker', max_tokens: 8, tenant: 'acme', priority: 1 }),
        JSON.stringify({ timestamp_ms: 10, messages, max_tokens: 4, session: 's1' }),
        JSON.stringify({ timestamp_ms: 20.5, prompt_tokens: [5, 6, 7], max_tokens: 2 }),
      ].join('\n'),
    );
    const reqs = [...loadTrace(path, 'jsonl').open()];
    assert.deepEqual(Array.from(reqs[0]!.promptTokens), estimateTokenizer.encode('the cache of the worker'));
    assert.equal(reqs[0]!.promptText, 'the cache of the worker');
    assert.equal(reqs[0]!.tenant, 'acme');
    assert.equal(reqs[0]!.priority, 1);
    assert.equal(reqs[1]!.promptText, renderChat(messages));
    assert.deepEqual(Array.from(reqs[1]!.promptTokens), estimateTokenizer.encode(renderChat(messages)));
    assert.equal(reqs[1]!.session, 's1');
    assert.deepEqual(Array.from(reqs[2]!.promptTokens), [5, 6, 7]);
    assert.equal(reqs[2]!.arrivalMs, 20.5);
    assert.equal(reqs[2]!.promptText, undefined);
  });

  it('reads "n" as that many sampled answers, each max_tokens long', () => {
    const rows = [{ n: 4 }, { n: 1 }, {}].map((x, i) => JSON.stringify({ timestamp_ms: i, prompt: 'p', max_tokens: 5, ...x }));
    const reqs = [...loadTrace(file(rows.join('\n')), 'jsonl').open()];
    assert.deepEqual(reqs.map((r) => r.sampleTokens), [[5, 5, 5, 5], undefined, undefined]);
  });

  it('reads "priority" as a vLLM integer or a class name', () => {
    const rows = ['critical', 'standard', 'sheddable', 7].map((priority, i) => JSON.stringify({ timestamp_ms: i, prompt: 'p', max_tokens: 1, priority }));
    const reqs = [...loadTrace(file(rows.join('\n')), 'jsonl').open()];
    assert.deepEqual(reqs.map((r) => r.priority), [0, 1, 2, 7]);
  });

  it('rejects malformed rows with their line numbers', () => {
    const cases: Array<[string, RegExp]> = [
      [JSON.stringify({ timestamp_ms: 0, max_tokens: 3 }), /exactly one of "prompt", "prompt_tokens", "messages"/],
      [JSON.stringify({ timestamp_ms: 0, prompt: 'x', prompt_tokens: [1], max_tokens: 3 }), /exactly one/],
      [JSON.stringify({ timestamp_ms: 0, prompt: 'hi', max_tokens: 0 }), /"max_tokens" must be an integer ≥ 1/],
      [JSON.stringify({ timestamp_ms: -1, prompt: 'hi', max_tokens: 1 }), /"timestamp_ms" must be a non-negative number/],
      [JSON.stringify({ timestamp_ms: 0, messages: [{ content: 'x' }], max_tokens: 1 }), /role/],
      [JSON.stringify({ timestamp_ms: 0, prompt: 'hi', max_tokens: 1, priority: 'high' }), /"priority" must be an integer/],
      [JSON.stringify({ timestamp_ms: 0, prompt: '', max_tokens: 1 }), /prompt is empty/],
      [JSON.stringify({ timestamp_ms: 0, prompt: 'hi', max_tokens: 1, n: 0 }), /"n" must be an integer from 1 to 128/],
      [JSON.stringify({ timestamp_ms: 0, prompt: 'hi', max_tokens: 1, n: 2.5 }), /"n" must be an integer/],
    ];
    for (const [row, re] of cases) {
      const path = file(JSON.stringify({ timestamp_ms: 0, prompt: 'ok', max_tokens: 1 }) + '\n' + row + '\n');
      assert.throws(() => [...jsonlSource(path).open()], (e: unknown) => e instanceof TraceError && e.line === 2 && re.test(e.message), row);
      const src = jsonlSource(path, { skipBad: true });
      assert.equal([...src.open()].length, 1);
      assert.equal(src.skipped, 1);
    }
  });
});

describe('kvgate jsonl loader: sessions', () => {
  const rows = [
    { timestamp_ms: 0, prompt_tokens: [1, 2, 3, 4], max_tokens: 3, session: 'a' },
    { timestamp_ms: 5, prompt_tokens: [9, 9], max_tokens: 2 },
    { timestamp_ms: 100, prompt_tokens: [5, 6], max_tokens: 2, session: 'a', append: true, think_ms: 40 },
    { timestamp_ms: 150, prompt_tokens: [7, 7, 7], max_tokens: 1, session: 'b' },
    { timestamp_ms: 400, prompt_tokens: [1, 2, 3, 4, 8], max_tokens: 1, session: 'a' },
  ];

  it('yields first turns only; later turns come from next(), a think time after the previous one finished', () => {
    const src = jsonlSource(file(rows.map((r) => JSON.stringify(r)).join('\n') + '\n'));
    const roots = [...src.open()];
    assert.deepEqual(roots.map((r) => [r.arrivalMs, r.session ?? '-', r.turns ?? 1]), [[0, 'a', 3], [5, '-', 1], [150, 'b', 1]]);
    const a0 = roots[0]!;
    assert.equal(roots[2]!.next, undefined);
    // Turn 2 appends to turn 1's prompt and the answer the engine generates for it; think_ms given.
    const a1 = a0.next!(1000)!;
    assert.equal(a1.arrivalMs, 1040);
    assert.deepEqual(Array.from(a1.promptTokens), [1, 2, 3, 4, ...answerTokens(a0.outputSeed, 3), 5, 6]);
    assert.equal(a1.turns, 2);
    // Turn 3 is given whole, with no think_ms: the recorded gap (400 − 100) is the think time.
    const a2 = a1.next!(2000)!;
    assert.equal(a2.arrivalMs, 2300);
    assert.deepEqual(Array.from(a2.promptTokens), [1, 2, 3, 4, 8]);
    assert.equal(a2.next, undefined);
    // Every request, later turns included, once each.
    assert.equal([...expandSessions(src.open())].length, 5);
  });

  it('reports a malformed later turn by its line when it is due, or skips it with skipBad', () => {
    const bad = [...rows];
    bad[2] = { ...rows[2]!, max_tokens: 0 };
    const path = file(bad.map((r) => JSON.stringify(r)).join('\n') + '\n');
    const [a0] = [...jsonlSource(path).open()];
    assert.throws(() => a0!.next!(10), (e: unknown) => e instanceof TraceError && e.line === 3 && /max_tokens/.test(e.message));
    const src = jsonlSource(path, { skipBad: true });
    const [b0] = [...src.open()];
    const b1 = b0!.next!(10)!;
    assert.deepEqual(Array.from(b1.promptTokens), [1, 2, 3, 4, 8]);
    assert.equal(b1.arrivalMs, 10 + 400);
    assert.equal(src.skipped, 1);
    // "append" needs a previous turn.
    const first = file(JSON.stringify({ timestamp_ms: 0, prompt: 'x', max_tokens: 1, session: 's', append: true }) + '\n');
    assert.throws(() => [...jsonlSource(first).open()], /"append" on the first turn/);
  });
});
