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
