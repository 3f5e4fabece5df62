export type Mode = 'live' | 'test';
/** A mode-scoped connection sees only that mode's rows of moded tables (row-level security); system sees all. */
export type Scope = Mode | 'system';

export interface QueryResult<R> {
  rows: R[];
  rowCount: number;
}

export interface Queryable {
  readonly scope: Scope;
  query<R = Record<string, any>>(text: string, params?: unknown[]): Promise<QueryResult<R>>;
  /** Several statements, no parameters (migrations). */
  exec(text: string): Promise<void>;
}

/** A connection handle. `transaction` on a Tx reuses it, so verbs compose. */
export interface Db extends Queryable {
  readonly inTransaction: boolean;
  transaction<T>(fn: (tx: Tx) => Promise<T>): Promise<T>;
}
export type Tx = Db & { readonly inTransaction: true };

export interface Database {
  readonly kind: 'pglite' | 'pg';
  scoped(scope: Scope): Db;
  /** Fails when the database is unreachable. */
  ping(): Promise<void>;
  close(): Promise<void>;
}

export const modeOf = (testMode: boolean): Mode => (testMode ? 'test' : 'live');

/**
 * Statements and transactions that may wait for a connection of one pool (PostgreSQL, per scope) or
 * for the embedded store's one connection (catalog LD-6). Beyond this the database refuses new work
 * at once with DatabaseBusyError (503 with Retry-After) instead of letting requests pile up behind a
 * slow database until their clients time out; the connections in use never exceed the pool's size.
 */
export const MAX_WAITING_FOR_CONNECTION = 256;

export class DatabaseBusyError extends Error {
  constructor() {
    super(`more than ${MAX_WAITING_FOR_CONNECTION} statements are waiting for a database connection`);
    this.name = 'DatabaseBusyError';
  }
}

/** deadlock_detected, serialization_failure: a transaction so aborted did nothing and is run again. */
const RETRYABLE_CODES = new Set(['40P01', '40001']);
/** How many times in all a transaction PostgreSQL aborted as a deadlock victim or a serialization failure runs. */
export const TRANSACTION_ATTEMPTS = 3;
export const isRetryableConflict = (err: unknown): boolean => RETRYABLE_CODES.has((err as { code?: string } | null)?.code ?? '');

/**
 * The SQL of one keyset page, as src/http/pagination.ts `keyset` builds it from a cursor: stores take
 * this shape (never the http/ helper), so the cursor's parsing and its error stay in the service.
 */
export interface KeysetSql {
  /** Condition to AND into the WHERE clause ('TRUE' on the first page). */
  condition: string;
  /** The condition's parameters, then the LIMIT's. */
  params: unknown[];
  /** ORDER BY ... LIMIT $n. */
  orderLimit: string;
}
