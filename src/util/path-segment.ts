/** A path segment percent-decoded, or as it came when it is not valid percent-encoding ("%zz"). */
export function decodeSegment(raw: string): string {
  try {
    return decodeURIComponent(raw);
  } catch {
    return raw;
  }
}
