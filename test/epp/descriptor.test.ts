/**
 * The hand-encoded messages of descriptor.ts against protobufjs's encoding of the same message:
 * what the proxy decodes must be the same, whatever the chunk's size (its length varint of one,
 * two or three bytes) and direction.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { bytesField, CONSTANT_RESPONSES, decodeProcessingResponse, encodeProcessingResponse, MAX_BODY_CHUNK, streamedBodyParts, writeStreamedBody } from '../../src/epp/descriptor.js';

const SIZES = [0, 1, 127, 128, 16_383, 16_384, MAX_BODY_CHUNK];

test('a streamed body chunk decodes as the message protobufjs encodes, in both directions', () => {
  for (const direction of ['request_body', 'response_body'] as const) {
    for (const size of SIZES) {
      for (const end of [false, true]) {
        const body = Buffer.alloc(size, size % 251);
        const mine = decodeProcessingResponse(Buffer.concat(streamedBodyParts(direction, body, end)));
        const other = direction === 'request_body' ? 'response_body' : 'request_body';
        assert.equal((mine as { response?: string }).response, direction, `${direction} ${size}: the member of the oneof that is set`);
        assert.ok(mine[other] == null, `${direction} ${size}: the other direction is not set`);
        const streamed = mine[direction]?.response?.body_mutation?.streamed_response;
        assert.ok(streamed !== undefined, `${direction} ${size} ${end}: a streamed_response`);
        assert.deepEqual(Buffer.from(streamed.body ?? []), body, `${direction} ${size}: the body`);
        assert.equal(streamed.end_of_stream === true, end, `${direction} ${size}: end_of_stream`);
        if (size > 0 && end) {
          // With every field set, the bytes are protobufjs's own, byte for byte.
          const reference = encodeProcessingResponse({ [direction]: { response: { body_mutation: { streamed_response: { body, end_of_stream: true } } } } });
          assert.deepEqual(Buffer.concat(streamedBodyParts(direction, body, end)), reference, `${direction} ${size}: the bytes`);
        }
      }
    }
  }
});

test('a body is written as chunks of at most MAX_BODY_CHUNK bytes, end_of_stream on the last only', () => {
  for (const size of [0, 1, MAX_BODY_CHUNK, MAX_BODY_CHUNK + 1, 3 * MAX_BODY_CHUNK - 7]) {
    for (const end of [false, true]) {
      const body = Buffer.alloc(size);
      for (let i = 0; i < size; i++) body[i] = i % 253;
      const chunks: Array<{ body: Buffer; end: boolean }> = [];
      writeStreamedBody('response_body', body, end, (parts) => {
        const s = decodeProcessingResponse(Buffer.concat(parts)).response_body!.response!.body_mutation!.streamed_response!;
        chunks.push({ body: Buffer.from(s.body ?? []), end: s.end_of_stream === true });
      });
      assert.equal(chunks.length, Math.max(1, Math.ceil(size / MAX_BODY_CHUNK)), `${size}: chunks`);
      assert.ok(chunks.every((c) => c.body.length <= MAX_BODY_CHUNK));
      assert.deepEqual(Buffer.concat(chunks.map((c) => c.body)), body, `${size}: the body, in order`);
      assert.deepEqual(chunks.map((c) => c.end), chunks.map((_, i) => end && i === chunks.length - 1), `${size} ${end}: end_of_stream`);
    }
  }
});

test('a bytes field becomes a Buffer without a copy; unset, an empty one', () => {
  assert.equal(bytesField(undefined).length, 0);
  assert.equal(bytesField(new Uint8Array(0)).length, 0);
  const backing = new Uint8Array([9, 1, 2, 3, 9]);
  const view = bytesField(backing.subarray(1, 4));
  assert.deepEqual([...view], [1, 2, 3]);
  backing[2] = 7;
  assert.equal(view[1], 7, 'the same memory');
});

test('the constant answers decode as the messages they stand for', () => {
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.requestHeadersContinue)), ['request_headers']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.responseHeadersContinue)), ['response_headers']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.responseBodyContinue)), ['response_body']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.requestTrailers)), ['request_trailers']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.responseTrailers)), ['response_trailers']);
});
