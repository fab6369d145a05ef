/**
 * Multipart form bodies: vLLM's `POST /v1/audio/transcriptions` and `/v1/audio/translations`
 * take the audio as OpenAI's do, a `multipart/form-data` upload. kvgate reads the text fields it
 * routes on (`model`, and `prompt` as the text a request is routed on) and relays the body byte
 * for byte, boundary and all; the worker checks the rest.
 */
import { ApiError, errors } from './errors.js';

export const FORM_TYPE = /^multipart\/form-data\s*;\s*(?:.*;\s*)?boundary=/i;

export interface FormFields {
  /** Text fields by name (the first of a repeated name). */
  fields: Record<string, string>;
  /** Names of the fields that carry a file. */
  files: string[];
}

/**
 * The fields of a multipart body, parsed by the platform's own FormData parser (undici's, the one
 * `fetch` uses). A body it cannot parse (a wrong boundary, a truncated part) is a 400.
 */
export async function formFields(body: Buffer, contentType: string): Promise<FormFields> {
  let form: FormData;
  try {
    form = await new Response(body, { headers: { 'content-type': contentType } }).formData();
  } catch {
    throw new ApiError(400, 'invalid_request_error', 'invalid_form', 'request body is not a valid multipart/form-data body for its boundary', null);
  }
  const fields: Record<string, string> = {};
  const files: string[] = [];
  for (const [name, value] of form) {
    if (typeof value === 'string') {
      if (!(name in fields)) fields[name] = value;
    } else files.push(name);
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
