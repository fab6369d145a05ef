/**
 * Building blocks more than one section uses: positive durations and sizes, shares, and where a
 * secret kvgate itself sends or uses is read from.
 */
import { z } from 'zod';

/** A duration in milliseconds. */
export const ms = z.number().positive();
/** A size in bytes. */
export const bytes = z.int().positive();
/** A share in (0, 1]. */
export const unitInterval = z.number().gt(0).max(1);

/** A secret kvgate itself sends or uses (not a client key): where to read it. */
export const secretSource = z
  .strictObject({
    env: z.string().min(1).optional(),
    file: z.string().min(1).optional(),
    value: z.string().min(1).optional(),
  })
  .refine((k) => [k.env, k.file, k.value].filter((x) => x !== undefined).length === 1, {
    message: 'give exactly one of env, file or value',
  });
