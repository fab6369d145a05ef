import { test } from 'node:test';
import assert from 'node:assert/strict';
import { HttpParseError, ResponseParser, type ResponseHead } from '../../src/http/response-parser.js';

/** Parses `wire` fed in pieces of `step` bytes; returns what the sink saw. */
function parse(wire: string, step = wire.length, noBody = false): { head: ResponseHead | null; body: string; ended: boolean; parser: ResponseParser } {
  const out = { head: null as ResponseHead | null, body: '', ended: false };
  const parser = new ResponseParser(
    {
      onHead: (h) => (out.head = h),
      onBody: (c) => (out.body += c.toString('latin1')),
      onEnd: () => (out.ended = true),
    },
    noBody,
  );
  const buf = Buffer.from(wire, 'latin1');
  for (let i = 0; i < buf.length; i += step) parser.feed(buf.subarray(i, i + step));
  return Object.assign(out, { parser });
}

const CHUNKED =
  'HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n' +
  '5\r\nhello\r\n1a;ext=1\r\n' + 'abcdefghijklmnopqrstuvwxyz' + '\r\n0\r\nx-trailer: 1\r\n\r\n';

test('response parser: a Content-Length body and a chunked body, whatever the read boundaries', () => {
  const cl = 'HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\nKeep-Alive: timeout=5\r\n\r\n{"ok":true}';
  for (const step of [1, 2, 3, 7, 64, 1000]) {
    const a = parse(cl, step);
    assert.equal(a.head?.status, 200);
    assert.equal(a.head?.headers['content-type'], 'application/json', 'names are lower-cased');
    assert.equal(a.head?.keepAlive, true);
    assert.equal(a.head?.keepAliveHintMs, 5000);
    assert.equal(a.body, '{"ok":true}');
    assert.equal(a.ended, true);
    const b = parse(CHUNKED, step);
    assert.equal(b.body, 'hello' + 'abcdefghijklmnopqrstuvwxyz', `step ${step}`);
    assert.equal(b.ended, true);
  }
});

test('response parser: 1xx heads are skipped, bodiless statuses end at the head, close-delimited bodies end with the connection', () => {
  const a = parse('HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n');
  assert.equal(a.head?.status, 204);
  assert.equal(a.ended, true);
  const h = parse('HTTP/1.1 200 OK\r\ncontent-length: 5\r\n\r\n', 1000, true);
  assert.equal(h.ended, true, 'the answer to HEAD has no body whatever its Content-Length says');
  const c = parse('HTTP/1.0 200 OK\r\n\r\nsome bytes', 4);
  assert.equal(c.head?.keepAlive, false);
  assert.equal(c.ended, false);
  assert.equal(c.parser.end(), true);
  assert.equal(c.body, 'some bytes');
  assert.equal(c.ended, true);
  const k = parse('HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 0\r\n\r\n');
  assert.equal(k.head?.keepAlive, false);
  assert.equal(k.ended, true);
  const trunc = parse('HTTP/1.1 200 OK\r\ncontent-length: 10\r\n\r\nabc');
  assert.equal(trunc.parser.end(), false, 'a Content-Length body cut short is not complete');
});

test('response parser: what could smuggle a second response is an error', () => {
  const bad = [
    'HTTP/1.1 200 OK\r\ncontent-length: 3\r\ncontent-length: 4\r\n\r\nabcd',
    'HTTP/1.1 200 OK\r\ncontent-length: 3\r\ntransfer-encoding: chunked\r\n\r\n',
    'HTTP/1.1 200 OK\r\ncontent-length: -1\r\n\r\n',
    'HTTP/1.1 200 OK\r\nx: a\r\n folded\r\n\r\n',
    'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n',
    'HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n3\r\nabcX\r\n',
    'HTTP/1.1 200 OK\r\ncontent-length: 1\r\n\r\nab',
    'HTTP/2 200\r\n\r\n',
    'garbage\r\n\r\n',
  ];
  for (const wire of bad) assert.throws(() => parse(wire), HttpParseError, JSON.stringify(wire));
  assert.throws(() => parse('HTTP/1.1 200 OK\r\nx: ' + 'a'.repeat(70_000)), /too large/);
  assert.equal(parse('HTTP/1.1 200 OK\r\ncontent-length: 3\r\nContent-Length: 3\r\n\r\nabc').body, 'abc', 'repeated equal lengths are fine');
});
