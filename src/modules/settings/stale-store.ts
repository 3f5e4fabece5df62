import type { Queryable } from '../../db/types.js';

// An AppSettings row's stamp (migration 0041): the keys of its overrides that do not validate against
// the settings_schema stamped `stale_schema`, judged while the row's updated_at was `stale_at`.

/**
 * Per key, how many users of the reader's mode (row-level security on users) hold a stamped stale
 * override under schema `stamp`: the rows whose stamp holds, counted in one aggregate.
 */
export async function countStampedStaleKeys(db: Queryable, appId: string, stamp: string): Promise<{ key: string; n: number }[]> {
  const { rows } = await db.query<{ key: string; n: number }>(
    `SELECT k.key, count(*)::int AS n
       FROM app_settings s JOIN users u ON u.id = s.user_id CROSS JOIN LATERAL jsonb_array_elements_text(s.stale_keys) AS k(key)
      WHERE s.application_id = $1 AND s.stale_schema = $2 AND s.stale_at = s.updated_at
      GROUP BY k.key ORDER BY k.key`,
    [appId, stamp],
  );
  return rows;
}

/** The overrides of the reader's mode's rows whose stamp does not hold for schema `stamp` (none, another schema's, older than the row). */
export async function listUnstampedOverrides(db: Queryable, appId: string, stamp: string): Promise<{ overrides: Record<string, unknown> }[]> {
  const { rows } = await db.query<{ overrides: Record<string, unknown> }>(
    `SELECT s.overrides FROM app_settings s JOIN users u ON u.id = s.user_id
      WHERE s.application_id = $1 AND (s.stale_schema IS DISTINCT FROM $2 OR s.stale_at IS DISTINCT FROM s.updated_at)`,
    [appId, stamp],
  );
  return rows;
}

/** Every user's row for the Application, of both modes (no join on users), held until the transaction ends. */
export async function lockAppSettingsOf(db: Queryable, appId: string): Promise<{ user_id: string; overrides: Record<string, unknown> }[]> {
  const { rows } = await db.query<{ user_id: string; overrides: Record<string, unknown> }>(
    'SELECT user_id, overrides FROM app_settings WHERE application_id = $1 ORDER BY user_id FOR UPDATE',
    [appId],
  );
  return rows;
}

/** Stamps every row of the Application (locked by lockAppSettingsOf) for schema `stamp`: `stale` lists the rows with stale keys, the others have none. */
export async function restampAppSettings(db: Queryable, appId: string, stamp: string, stale: { user_id: string; keys: string[] }[]): Promise<void> {
  await db.query(`UPDATE app_settings SET stale_keys = '[]', stale_schema = $2, stale_at = updated_at WHERE application_id = $1`, [appId, stamp]);
  if (!stale.length) return;
  await db.query(
    `UPDATE app_settings s SET stale_keys = v.keys
       FROM jsonb_to_recordset($2::jsonb) AS v(user_id text, keys jsonb)
      WHERE s.application_id = $1 AND s.user_id = v.user_id`,
    [appId, JSON.stringify(stale)],
  );
}

/** One row's stamp, written with its overrides (`at` is the updated_at written). */
export interface StaleStamp {
  keys: string[];
  schema: string;
  at: Date;
}
