import type { KeysetSql, Queryable } from './types.js';

/** A list's conditions (ANDed) and their parameters, numbered before a keyset page's. */
export interface Conditions {
  where: string[];
  params: unknown[];
}

/**
 * One keyset page of `from` (the statement before its WHERE: SELECT … FROM …): the rows matching
 * every condition and the page's, in the page's order, up to its limit (+1 to learn has_more).
 */
export async function selectPage<R>(db: Queryable, from: string, { where, params }: Conditions, ks: KeysetSql): Promise<R[]> {
  const { rows } = await db.query<R>(`${from} WHERE ${[...where, ks.condition].join(' AND ')} ${ks.orderLimit}`, [...params, ...ks.params]);
  return rows;
}

/**
 * Conditions to build, starting from `where` and `params`: `add` numbers its value as the next
 * parameter and writes the condition naming it.
 */
export function conditions(where: string[] = [], params: unknown[] = []): Conditions & { add(sql: (n: number) => string, value: unknown): void } {
  return { where, params, add: (sql, value) => void where.push(sql(params.push(value))) };
}
