/**
 * How many draft tokens a round asks for.
 *
 * FixedK: the configured k of each cascade, always.
 */
import type { KChooser } from './cascade.js';

export class FixedK implements KChooser {
  constructor(private readonly byModel: ReadonlyMap<string, number>) {}

  chooseK(model: string): number {
    return this.byModel.get(model) ?? 0;
  }
}
