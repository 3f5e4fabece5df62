import { AsyncLocalStorage } from 'node:async_hooks';

// Marks the async context of a running transaction. A query on a root handle from inside it is a
// bug (outside the transaction on pg, a deadlock on PGlite's single connection), so it throws.
//
// The check is on under `npm test` (NODE_ENV=test, where every code path is exercised) and in
// development; in production it is off: an AsyncLocalStorage in use makes Node 20 run promise hooks
// on every promise of the process, a cost paid by every request (about 8% of a hot route's
// throughput) to catch a programming error the suite already catches.
const enabled = process.env.NODE_ENV === 'test' || process.env.NODE_ENV === 'development' || process.env.PLATFORM_TX_GUARD === '1';
const inside = enabled ? new AsyncLocalStorage<object>() : null;

export function runInTransactionContext<T>(owner: object, fn: () => Promise<T>): Promise<T> {
  return inside ? inside.run(owner, fn) : fn();
}

export function assertNotInTransaction(owner: object): void {
  if (inside?.getStore() === owner) {
    throw new Error('query on a root Db inside a transaction: pass the transaction handle instead');
  }
}
