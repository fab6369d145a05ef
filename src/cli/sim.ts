export const help = 'kvgate sim: not built yet\n';
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('kvgate sim: not built yet\n');
  return 1;
}
