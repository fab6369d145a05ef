/** jsonNestsDeeperThan: exact nesting against a reference walk, whatever the brackets in strings. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { jsonNestsDeeperThan, MAX_JSON_DEPTH } from '../../src/api/json-depth.js';
import { seededRng } from '../../src/util/rng.js';

/** The deepest nesting of the text, brackets inside strings left out. */
function depthOf(text: string): number {
  let depth = 0;
  let deepest = 0;
  let inString = false;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (inString) {
      if (c === '\\') i++;
      else if (c === '"') inString = false;
    } else if (c === '"') inString = true;
    else if (c === '[' || c === '{') deepest = Math.max(deepest, ++depth);
    else if (c === ']' || c === '}') depth--;
  }
  return deepest;
}

test('nesting up to the limit passes and one level more is refused, with any number of brackets inside strings', () => {
  const max = MAX_JSON_DEPTH;
  for (const inStrings of [0, 10, max, 5 * max]) {
    const noise = JSON.stringify('[{'.repeat(inStrings) + 'x\\"[');
    for (const depth of [1, max - 1, max, max + 1, 2 * max]) {
      const text = '['.repeat(depth - 1) + `{"a":${noise},"b":[]`.slice(0, -2) + '1}' + ']'.repeat(depth - 1);
      assert.equal(depthOf(text), depth, 'the reference');
      assert.equal(jsonNestsDeeperThan(Buffer.from(text)), depth > max, `depth ${depth}, ${inStrings} brackets in a string`);
      assert.equal(jsonNestsDeeperThan(new Uint8Array(Buffer.from(text))), depth > max, 'a Uint8Array as a Buffer');
    }
  }
});

test('random texts of brackets, strings and escapes: the same answer as the reference walk at any limit', () => {
  const rand = seededRng(49);
  const pieces = ['[', ']', '{', '}', '"', '\\', 'a', ',', ' ', '[{', '"[[[', ']"'];
  for (let n = 0; n < 2000; n++) {
    let text = '';
    const len = Math.floor(rand() * 200);
    for (let i = 0; i < len; i++) text += pieces[Math.floor(rand() * pieces.length)];
    const d = depthOf(text);
    for (const max of [0, 1, 3, d - 1, d, d + 1, 64]) {
      if (max < 0) continue;
      assert.equal(jsonNestsDeeperThan(Buffer.from(text), max), d > max, `${JSON.stringify(text)} at ${max}`);
    }
  }
});
