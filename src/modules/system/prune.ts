import type { Deps } from '../../context.js';

/** Drops idempotency records past their 24 hours, counter windows that have ended and idle login lockouts. */
export async function pruneExpired(deps: Deps): Promise<{ idempotency_keys: number; counters: number; login_lockouts: number }> {
  const db = deps.database.scoped('system');
  const now = deps.clock.now();
  const keys = await db.query('DELETE FROM idempotency_keys WHERE expires_at <= $1', [now]);
  const counters = await db.query('DELETE FROM counters WHERE expires_at <= $1', [now]);
  const lockouts = await db.query('DELETE FROM login_lockouts WHERE expires_at <= $1', [now]);
  return { idempotency_keys: keys.rowCount, counters: counters.rowCount, login_lockouts: lockouts.rowCount };
}
