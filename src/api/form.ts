/**
 * Multipart form bodies: vLLM's `POST /v1/audio/transcriptions` and `/v1/audio/translations`
 * take the audio as OpenAI's do, a `multipart/form-data` upload (RFC 7578). kvgate reads the text
 * fields it routes on (`model`, and `prompt` as the text a request is routed on) and relays the
 * body byte for byte, boundary and all; the worker checks the rest.
 *
 * The parts are found with Buffer.indexOf (native) and only the text fields are decoded. On a
 * 25 MB upload that takes 2.7–4.5 ms of the event loop, where the platform's parser (`new
 * Response(body).formData()`, undici's) took 13–38 ms, copying the file into a Blob kvgate never
 * reads (the same process, six runs each; test/api/form.test.ts checks the two agree).
 */
import { ApiError, errors } from './errors.js';

/** A multipart/form-data Content-Type with a boundary kvgate can read. */
export function isFormType(contentType: string): boolean {
  return /^multipart\/form-data\s*;/i.test(contentType) && boundaryOf(contentType) !== null;
}

export interface FormFields {
  /** Text fields by name (the first of a repeated name). */
  fields: Record<string, string>;
  /** Names of the fields that carry a file. */
  files: string[];
}

const CRLF = Buffer.from('\r\n');
const HEAD_END = Buffer.from('\r\n\r\n');
/** A text field longer than this is not decoded (kvgate routes on short ones: model, prompt). */
const MAX_TEXT_FIELD = 1 << 20;

const invalid = (why: string): ApiError =>
  new ApiError(400, 'invalid_request_error', 'invalid_form', `request body is not a valid multipart/form-data body: ${why}`, null);

/** The boundary parameter of a multipart Content-Type (quoted or not), or null. */
export function boundaryOf(contentType: string): string | null {
  const m = /;\s*boundary=(?:"([^"]{1,70})"|([^\s;"]{1,70}))/i.exec(contentType);
  return m === null ? null : (m[1] ?? m[2]!);
}

const NAME = /;\s*name="([^"]*)"|;\s*name=([^\s;"]+)/i;
const FILENAME = /;\s*filename\*?=/i;

/** The name="…" of a part's Content-Disposition (as browsers and fetch write it: a quote in it is %22), or a bare token. */
function dispositionName(disposition: string): string | undefined {
  const m = NAME.exec(disposition);
  return m === null ? undefined : (m[1] ?? m[2]);
}

/** The fields of a multipart body. A body that does not parse for its boundary is a 400. */
export function formFields(body: Buffer, contentType: string): FormFields {
  const boundary = boundaryOf(contentType);
  if (boundary === null) throw invalid('no boundary in its Content-Type');
  const delimiter = Buffer.from(`--${boundary}`);
  const next = Buffer.from(`\r\n--${boundary}`);
  // A preamble before the first delimiter is allowed and ignored.
  let pos = body.subarray(0, delimiter.length).equals(delimiter) ? 0 : body.indexOf(next);
  if (pos < 0) throw invalid('its boundary does not occur in it');
  if (pos > 0) pos += 2;
  // No prototype: a field may be named `constructor` or `__proto__`.
  const fields: Record<string, string> = Object.create(null) as Record<string, string>;
  const files: string[] = [];
  for (;;) {
    pos += delimiter.length;
    if (body[pos] === 0x2d && body[pos + 1] === 0x2d) break; // the closing delimiter
    // Transport padding (spaces, tabs) may follow a delimiter before its line ends.
    while (body[pos] === 0x20 || body[pos] === 0x09) pos++;
    if (body.indexOf(CRLF, pos) !== pos) throw invalid('a delimiter is not followed by a line end');
    pos += 2;
    const headEnd = body.indexOf(HEAD_END, pos);
    if (headEnd < 0) throw invalid('a part has no end to its headers');
    const head = body.toString('utf8', pos, headEnd);
    const start = headEnd + 4;
    const end = body.indexOf(next, start);
    if (end < 0) throw invalid('a part is not closed by the boundary (truncated?)');
    let disposition: string | undefined;
    for (const line of head.split('\r\n')) {
      const colon = line.indexOf(':');
      if (colon > 0 && line.slice(0, colon).trim().toLowerCase() === 'content-disposition') disposition = line.slice(colon + 1);
    }
    const name = disposition === undefined ? undefined : dispositionName(disposition);
    if (name === undefined) throw invalid('a part has no Content-Disposition name');
    if (FILENAME.test(disposition!)) files.push(name);
    else if (!Object.hasOwn(fields, name) && end - start <= MAX_TEXT_FIELD) fields[name] = body.toString('utf8', start, end);
    pos = end + 2;
  }
  return { fields, files };
}

/** An audio request's fields, checked for what kvgate routes on and what it cannot do without. */
export function checkAudioForm(f: FormFields): { model: string; prompt?: string } {
  const model = f.fields['model'];
  if (model === undefined || model === '') throw errors.invalidField('model', 'model is required: kvgate routes by model');
  if (!f.files.includes('file')) throw errors.invalidField('file', "file is required: the audio, as a file field named 'file'");
  const prompt = f.fields['prompt'];
  return prompt === undefined ? { model } : { model, prompt };
}
