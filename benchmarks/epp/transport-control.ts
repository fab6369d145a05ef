/**
 * The transport's share of `npm run bench -- epp`'s CPU per request, in a process of its own on
 * the EPP's core: an ext_proc server on the EPP's own transport (src/epp/grpc-bidi-server.ts on
 * node:http2, every message decoded and every answer encoded by src/epp/descriptor.ts) that makes
 * no decision. It answers each stream as `kvgate epp` answers a pick whose body is unchanged —
 * the request-headers response naming one fixed endpoint, the body echoed in streamed chunks, the
 * response headers continued and the response body echoed — without parsing the body, routing,
 * accounting, metrics or logs. Driven by the same load generator at saturation, its CPU per
 * request is the floor that kvgate's own work adds to.
 *
 * Argument: the port to listen on (0: any). Writes `listening PORT` on stdout once bound.
 */
import { GrpcBidiServer } from '../../src/epp/grpc-bidi-server.js';
import { bytesField, CONSTANT_RESPONSES, decodeProcessingRequest, EXT_PROC_SERVICE, writeStreamedBody } from '../../src/epp/descriptor.js';
import { PickResponses } from '../../src/epp/pick-response.js';

const ENDPOINT = '127.0.0.1:8000';
const picks = new PickResponses();

const server = new GrpcBidiServer(`/${EXT_PROC_SERVICE}/Process`, (call) => {
  const chunks: Buffer[] = [];
  let size = 0;
  const write = (parts: Buffer[]): void => call.write(parts);
  return {
    onMessage(bytes) {
      const { message: m, kind } = decodeProcessingRequest(bytes);
      switch (kind) {
        case 'request_headers':
          return;
        case 'request_body': {
          const chunk = bytesField(m.request_body!.body);
          chunks.push(chunk);
          size += chunk.length;
          if (m.request_body!.end_of_stream !== true) return;
          call.write(picks.headersResponse(ENDPOINT, {}, false));
          writeStreamedBody('request_body', chunks.length === 1 ? chunks[0]! : Buffer.concat(chunks, size), true, write);
          return;
        }
        case 'response_headers':
          call.write(CONSTANT_RESPONSES.responseHeadersContinue);
          return;
        case 'response_body':
          writeStreamedBody('response_body', bytesField(m.response_body!.body), m.response_body!.end_of_stream === true, write);
          return;
        case 'response_trailers':
          call.write(CONSTANT_RESPONSES.responseTrailers);
          return;
        default:
          call.fail(3, 'unexpected message');
      }
    },
    onHalfClose: () => call.end(),
    onCancel: () => undefined,
  };
});

void server.listen('127.0.0.1', Number(process.argv[2] ?? 0)).then((port) => process.stdout.write(`listening ${port}\n`));
