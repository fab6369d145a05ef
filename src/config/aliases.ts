/** The served model `name` is an alias of (config `aliases`), or undefined; own keys only. */
export function aliasTarget(aliases: Readonly<Record<string, string>>, name: string): string | undefined {
  return Object.hasOwn(aliases, name) ? aliases[name] : undefined;
}
