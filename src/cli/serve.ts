export const help = 'kvgate serve: not built yet\n';
export async function run(_argv: string[]): Promise<number> {
  process.stderr.write('kvgate serve: not built yet\n');
  return 1;
}
