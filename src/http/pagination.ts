import { invalidField } from '../errors.js';
import { unstorableText } from './validation.js';

export interface PageParams {
  limit?: number;
  cursor?: string;
}

const invalidCursor = () =>
  invalidField('query.cursor', 'is not a cursor from this list');

/** Cursors are opaque to clients: the sort key of the last row returned, base64url JSON. */
export function encodeCursor(key: readonly (string | number)[]): string {
  return Buffer.from(JSON.stringify(key)).toString('base64url');
}

export function decodeCursor(cursor: string, arity: number): (string | number)[] {
  try {
    const key = JSON.parse(Buffer.from(cursor, 'base64url').toString('utf8'));
    // A string the database cannot compare as sent (U+0000) is no position either.
    if (Array.isArray(key) && key.length === arity && key.every((v) => typeof v === 'string' || typeof v === 'number') && unstorableText(key, '') === null) {
      return key;
    }
  } catch {
    /* fall through */
  }
  throw invalidCursor();
}

/**
 * Only the instants toPage writes (toISOString of a four-digit year from 0001; PostgreSQL has no
 * year 0000): anything else Date.parse accepts, PostgreSQL may refuse to cast.
 */
const isCursorInstant = (at: string): boolean => /^(?!0000)\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}\.\d{3}Z$/.test(at) && !Number.isNaN(Date.parse(at)) && new Date(at).toISOString() === at;

export interface KeysetPage {
  /** SQL condition to AND into the WHERE clause ('TRUE' on the first page). */
  condition: string;
  /** The condition's parameters, then the LIMIT's: numbered from firstParam, after the caller's own. */
  params: unknown[];
  /** ORDER BY ... LIMIT $n (+1 row to learn has_more). */
  orderLimit: string;
  limit: number;
}

/**
 * Keyset pagination on (created_at, id), newest first (or oldest first for queues). A row inserted
 * while a client pages never moves a row across the cursor, so pages never repeat or skip rows that
 * existed when paging began.
 *
 * The LIMIT is a parameter, not text: each distinct statement text is prepared on every PostgreSQL
 * connection that runs it and stays there (src/db/pg.ts), so a limit written into the text made each
 * of the 100 limits of every filter combination a statement of its own.
 */
export function keyset(page: PageParams, firstParam: number, alias = '', direction: 'asc' | 'desc' = 'desc'): KeysetPage {
  const limit = page.limit ?? 20;
  const col = (c: string) => (alias ? `${alias}.${c}` : c);
  const dir = direction === 'asc' ? 'ASC' : 'DESC';
  const orderLimit = (limitParam: number) => `ORDER BY ${col('created_at')} ${dir}, ${col('id')} ${dir} LIMIT $${limitParam}::int`;
  if (!page.cursor) return { condition: 'TRUE', params: [limit + 1], orderLimit: orderLimit(firstParam), limit };
  const [at, id] = decodeCursor(page.cursor, 2);
  if (typeof at !== 'string' || typeof id !== 'string' || !isCursorInstant(at)) throw invalidCursor();
  return {
    condition: `(${col('created_at')}, ${col('id')}) ${direction === 'asc' ? '>' : '<'} ($${firstParam}::timestamptz, $${firstParam + 1})`,
    params: [at, id, limit + 1],
    orderLimit: orderLimit(firstParam + 2),
    limit,
  };
}

export function toPage<R extends { created_at: Date; id: string }, T>(rows: R[], limit: number, map: (row: R) => T) {
  const hasMore = rows.length > limit;
  const shown = hasMore ? rows.slice(0, limit) : rows;
  const last = shown[shown.length - 1];
  return {
    data: shown.map(map),
    page: {
      next_cursor: hasMore && last ? encodeCursor([last.created_at.toISOString(), last.id]) : null,
      has_more: hasMore,
    },
  };
}
