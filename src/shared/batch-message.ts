/**
 * The envelope of the routing and load channels' messages: `{"r": replica id, "e": [entries]}`,
 * one message per publish interval. Entries are checked by each channel.
 */
export interface BatchMessage {
  replica: string;
  entries: unknown[];
}

/** The parsed envelope, or null if the message is not one (not JSON, no replica id, no entry list). */
export function readBatch(message: string): BatchMessage | null {
  let m: { r?: unknown; e?: unknown };
  try {
    m = JSON.parse(message) as { r?: unknown; e?: unknown };
  } catch {
    return null;
  }
  return m !== null && typeof m === 'object' && typeof m.r === 'string' && Array.isArray(m.e) ? { replica: m.r, entries: m.e as unknown[] } : null;
}
