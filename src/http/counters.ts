import { ApiError } from '../errors.js';
import type { Queryable } from '../db/types.js';

export interface CounterHit {
  count: number;
  /** When the current window ends. */
  resetAt: Date;
}

/**
 * Fixed-window counter in PostgreSQL, shared by every process: one upsert per hit.
 * Used by throttles and attempt limits; expired windows are pruned by the idempotency-prune job.
 */
export async function hitCounter(db: Queryable, bucket: string, windowSeconds: number, now: Date): Promise<CounterHit> {
  const windowMs = windowSeconds * 1000;
  const windowStart = new Date(Math.floor(now.getTime() / windowMs) * windowMs);
  const resetAt = new Date(windowStart.getTime() + windowMs);
  const { rows } = await db.query<{ count: number }>(
    `INSERT INTO counters (bucket, window_start, count, expires_at) VALUES ($1, $2, 1, $3)
     ON CONFLICT (bucket, window_start) DO UPDATE SET count = counters.count + 1
     RETURNING count`,
    [bucket, windowStart, resetAt],
  );
  return { count: rows[0].count, resetAt };
}

export const retryAfterSeconds = (resetAt: Date, now: Date): number =>
  Math.max(1, Math.ceil((resetAt.getTime() - now.getTime()) / 1000));

/**
 * Sliding-window quota shared by every process: at most `limit` allowed hits in any `windowSeconds`.
 * Each allowed hit is one counters row stamped with its instant; refused hits are not counted. Runs
 * in the caller's transaction, serialized per bucket by an advisory lock.
 */
export async function takeSlidingQuota(
  db: Queryable,
  bucket: string,
  limit: number,
  windowSeconds: number,
  now: Date,
): Promise<{ allowed: boolean; retryAt: Date | null }> {
  await db.query('SELECT pg_advisory_xact_lock(hashtext($1))', [bucket]);
  const since = new Date(now.getTime() - windowSeconds * 1000);
  const { rows } = await db.query<{ n: number; oldest: Date | null }>(
    'SELECT COALESCE(sum(count), 0)::int AS n, min(window_start) AS oldest FROM counters WHERE bucket = $1 AND window_start > $2',
    [bucket, since],
  );
  if (rows[0].n >= limit) return { allowed: false, retryAt: new Date(rows[0].oldest!.getTime() + windowSeconds * 1000) };
  await db.query(
    `INSERT INTO counters (bucket, window_start, count, expires_at) VALUES ($1, $2, 1, $3)
     ON CONFLICT (bucket, window_start) DO UPDATE SET count = counters.count + 1`,
    [bucket, now, new Date(now.getTime() + windowSeconds * 1000)],
  );
  return { allowed: true, retryAt: null };
}

/**
 * takeSlidingQuota for a request that must stop at the limit: beyond it, 429 rate_limited with
 * Retry-After (when a slot frees) and `message`; the throw rolls the caller's transaction back.
 */
export async function requireSlidingQuota(db: Queryable, bucket: string, limit: number, windowSeconds: number, now: Date, message: string): Promise<void> {
  const quota = await takeSlidingQuota(db, bucket, limit, windowSeconds, now);
  if (quota.allowed) return;
  throw new ApiError('rate_limited', { message, headers: { 'retry-after': String(retryAfterSeconds(quota.retryAt!, now)) } });
}
