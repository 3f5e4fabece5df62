import type { Queryable } from '../../db/types.js';

/** The tables and materialized views of the current schema and of pg_catalog, as quoted names, in order. */
export async function listVacuumTables(db: Queryable): Promise<{ name: string }[]> {
  const { rows } = await db.query<{ name: string }>(
    `SELECT format('%I.%I', n.nspname, c.relname) AS name FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
            WHERE c.relkind IN ('r', 'm') AND n.nspname IN (current_schema(), 'pg_catalog') ORDER BY 1`,
  );
  return rows;
}

/** Vacuums one table (a quoted name from listVacuumTables) and refreshes its planner statistics. */
export async function vacuumAnalyze(db: Queryable, name: string): Promise<void> {
  await db.exec(`VACUUM (ANALYZE) ${name}`);
}

/** Each returns how many rows it deleted. */
export async function deleteExpiredIdempotencyKeys(db: Queryable, now: Date): Promise<number> {
  return (await db.query('DELETE FROM idempotency_keys WHERE expires_at <= $1', [now])).rowCount;
}

export async function deleteExpiredCounters(db: Queryable, now: Date): Promise<number> {
  return (await db.query('DELETE FROM counters WHERE expires_at <= $1', [now])).rowCount;
}

export async function deleteExpiredLoginLockouts(db: Queryable, now: Date): Promise<number> {
  return (await db.query('DELETE FROM login_lockouts WHERE expires_at <= $1', [now])).rowCount;
}

/** Event clocks (src/outbox/emit.ts) whose last instant is a day before `now`. */
export async function deleteStaleEventClocks(db: Queryable, now: Date): Promise<number> {
  return (await db.query(`DELETE FROM event_clocks WHERE last_at <= $1::timestamptz - interval '1 day'`, [now])).rowCount;
}

export async function deleteExpiredBillingSimulatorSessions(db: Queryable, now: Date): Promise<number> {
  return (await db.query('DELETE FROM billing_simulator_sessions WHERE expires_at <= $1', [now])).rowCount;
}

/** Processor events received by `before` (their ids guard against a redelivery, which Stripe stops after 3 days). */
export const deleteOldProcessorEventsBatch = (db: Queryable, before: Date, limit: number): Promise<number> =>
  deleteBatch(db, 'processor_events', 't.received_at <= $1', before, limit);

/** Deletes at most `limit` rows `t` of `table` matching `where` (at $1); how many it deleted. */
async function deleteBatch(db: Queryable, table: string, where: string, at: Date, limit: number): Promise<number> {
  const { rowCount } = await db.query(`DELETE FROM ${table} WHERE id IN (SELECT t.id FROM ${table} t WHERE ${where} LIMIT $2)`, [at, limit]);
  return rowCount;
}

/** One-time tokens used or expired by `now`, unless a queued mail still carries the link (the relay must see it dead). */
export const deleteDeadOneTimeTokensBatch = (db: Queryable, now: Date, limit: number): Promise<number> =>
  deleteBatch(db, 'one_time_tokens', `(t.used_at <= $1 OR t.expires_at <= $1)
    AND NOT EXISTS (SELECT 1 FROM emails e WHERE e.status = 'queued' AND e.link_token_hash = t.token_hash)`, now, limit);

/** Mails out of the outbox (not queued) created by `before`. */
export const deleteOldEmailsBatch = (db: Queryable, before: Date, limit: number): Promise<number> =>
  deleteBatch(db, 'emails', `t.status <> 'queued' AND t.created_at <= $1`, before, limit);

/** Sessions that ended by `before`, with everything hanging off them (ON DELETE CASCADE). */
export const deleteEndedSessionsBatch = (db: Queryable, before: Date, limit: number): Promise<number> =>
  deleteBatch(db, 'sessions', 't.expires_at <= $1', before, limit);
