import type { Db, QueryResult, Tx } from './types.js';

const ROLLBACK = Symbol('rollback');

export interface LazyTransaction {
  /** A Tx handle; the real transaction begins at its first statement. */
  tx: Tx;
  /** Runs fn inside the transaction (beginning it if needed), then commits. */
  commitWith(fn: (tx: Tx) => Promise<void>): Promise<void>;
  /** Rolls back if a transaction was begun. */
  rollback(): Promise<void>;
}

/**
 * A transaction whose BEGIN waits for the first statement, so work before it (validation, hashing,
 * sleeps) holds no connection. Used to run an idempotent request's handler and the storage of its
 * response in one transaction.
 */
export function lazyTransaction(db: Db): LazyTransaction {
  let started: Promise<{ tx: Tx; finish: (commit: boolean) => void; done: Promise<void> }> | null = null;
  const begin = () =>
    (started ??= new Promise((resolve, reject) => {
      let settled = false;
      const done = db
        .transaction(async (tx) => {
          const decision = await new Promise<boolean>((finish) => {
            settled = true;
            resolve({ tx, finish, done });
          });
          if (!decision) throw ROLLBACK;
        })
        .catch((err) => {
          if (!settled) reject(err);
          else if (err !== ROLLBACK) throw err;
        });
    }));
  const tx: Tx = {
    scope: db.scope,
    inTransaction: true,
    query: async <R>(text: string, params?: unknown[]): Promise<QueryResult<R>> => (await begin()).tx.query<R>(text, params),
    exec: async (text: string) => (await begin()).tx.exec(text),
    transaction: (fn) => fn(tx),
  };
  return {
    tx,
    async commitWith(fn) {
      const t = await begin();
      try {
        await fn(t.tx);
      } catch (err) {
        t.finish(false);
        await t.done;
        throw err;
      }
      t.finish(true);
      await t.done;
    },
    async rollback() {
      if (!started) return;
      const t = await started;
      t.finish(false);
      await t.done;
    },
  };
}
