/**
 * The hand-encoded messages of descriptor.ts against protobufjs's encoding of the same message:
 * what the proxy decodes must be the same, whatever the chunk's size (its length varint of one,
 * two or three bytes) and direction.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { CONSTANT_RESPONSES, decodeProcessingResponse, encodeProcessingResponse, MAX_BODY_CHUNK, streamedBodyParts } from '../../src/epp/descriptor.js';

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

test('the constant answers decode as the messages they stand for', () => {
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.requestHeadersContinue)), ['request_headers']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.responseHeadersContinue)), ['response_headers']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.responseBodyContinue)), ['response_body']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.requestTrailers)), ['request_trailers']);
  assert.deepEqual(Object.keys(decodeProcessingResponse(CONSTANT_RESPONSES.responseTrailers)), ['response_trailers']);
});
