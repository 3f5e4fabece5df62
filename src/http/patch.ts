// Part A convention 7: PATCH changes only the fields sent; `custom` maps merge one level deep and
// a key sent as null is removed.

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
