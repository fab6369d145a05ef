export const help = 'kvgate bench: not built yet\n';
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('kvgate bench: not built yet\n');
  return 1;
}
