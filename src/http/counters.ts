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
