import { AsyncLocalStorage } from 'node:async_hooks';

// Marks the async context of a running transaction. A query on a root handle from inside it is a
// bug (outside the transaction on pg, a deadlock on PGlite's single connection), so it throws.
const inside = new AsyncLocalStorage<object>();

export function runInTransactionContext<T>(owner: object, fn: () => Promise<T>): Promise<T> {
  return inside.run(owner, fn);
}

export function assertNotInTransaction(owner: object): void {
  if (inside.getStore() === owner) {
    throw new Error('query on a root Db inside a transaction: pass the transaction handle instead');
  }
}
