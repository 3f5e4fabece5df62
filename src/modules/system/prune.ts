import type { Deps } from '../../context.js';

/** Drops idempotency records past their 24 hours and counter windows that have ended. */
export async function pruneExpired(deps: Deps): Promise<{ idempotency_keys: number; counters: number }> {
  const db = deps.database.scoped('system');
  const now = deps.clock.now();
  const keys = await db.query('DELETE FROM idempotency_keys WHERE expires_at <= $1', [now]);
  const counters = await db.query('DELETE FROM counters WHERE expires_at <= $1', [now]);
  return { idempotency_keys: keys.rowCount, counters: counters.rowCount };
}
