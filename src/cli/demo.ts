export const help = 'kvgate demo: not built yet\n';
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('kvgate demo: not built yet\n');
  return 1;
}
