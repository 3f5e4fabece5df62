// Part A convention 7: PATCH changes only the fields sent; `custom` maps merge one level deep and
// a key sent as null is removed.

import { ApiError } from '../errors.js';

/** 422 read_only_field naming every read-only field the PATCH body sent (the schemas accept them). */
export function assertNoReadOnlyFields(body: object, readOnly: readonly string[]): void {
  const sent = readOnly.filter((f) => f in body);
  if (sent.length) throw new ApiError('read_only_field', { details: { fields: sent } });
}

export interface PatchResult<T> {
  next: T;
  /** Names of fields whose value actually changed. */
  changed: (keyof T & string)[];
}

export function applyPatch<T extends object>(current: T, patch: Partial<T>, fields: readonly (keyof T & string)[]): PatchResult<T> {
  const next = { ...current };
  const changed: (keyof T & string)[] = [];
  for (const field of fields) {
    if (!(field in patch) || patch[field] === undefined) continue;
    const value = patch[field] as T[typeof field];
    if (JSON.stringify(current[field]) !== JSON.stringify(value)) {
      next[field] = value;
      changed.push(field);
    }
  }
  return { next, changed };
}

export function mergeCustom(
  current: Record<string, unknown>,
  patch: Record<string, unknown | null>,
): Record<string, unknown> {
  const merged: Record<string, unknown> = { ...current };
  for (const [key, value] of Object.entries(patch)) {
    if (value === null) delete merged[key];
    else merged[key] = value;
  }
  return merged;
}
