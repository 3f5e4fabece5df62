import type { Queryable } from '../../db/types.js';
import type { Settings } from './schemas.js';

export interface SettingsRow {
  user_id: string;
  theme: Settings['theme'];
  timezone: string;
  locale: string;
  notifications: Settings['notifications'];
  updated_at: Date;
}

/** The user's global Settings row (held until the transaction ends when `forUpdate`); null when there is none. */
export async function findSettings(db: Queryable, userId: string, forUpdate = false): Promise<SettingsRow | null> {
  const { rows } = await db.query<SettingsRow>(
    `SELECT user_id, theme, timezone, locale, notifications, updated_at FROM settings WHERE user_id = $1${forUpdate ? ' FOR UPDATE' : ''}`,
    [userId],
  );
  return rows[0] ?? null;
}

/** Holds the Profile's row until the transaction ends; its row count (0: the Profile is gone). */
export async function lockProfile(db: Queryable, userId: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM profiles WHERE user_id = $1 FOR UPDATE', [userId]);
  return rowCount;
}

export interface SettingsFields {
  theme: Settings['theme'];
  timezone: string;
  locale: string;
  notifications: Settings['notifications'];
}

export async function updateSettings(db: Queryable, userId: string, next: SettingsFields, now: Date): Promise<void> {
  await db.query('UPDATE settings SET theme = $2, timezone = $3, locale = $4, notifications = $5, updated_at = $6 WHERE user_id = $1', [
    userId, next.theme, next.timezone, next.locale, JSON.stringify(next.notifications), now,
  ]);
}

/** The Profile shows the Settings locale: a change of it moves the Profile's updated_at. */
export async function touchProfile(db: Queryable, userId: string, now: Date): Promise<void> {
  await db.query('UPDATE profiles SET updated_at = $2 WHERE user_id = $1', [userId, now]);
}

export interface AppSettingsRow {
  overrides: Record<string, unknown>;
  updated_at: Date;
  /** The row's stale keys, when its stamp holds (migration 0041): judged against the schema stamped `stale_schema`. */
  stale_keys: string[] | null;
  stale_schema: string | null;
}

export async function findAppSettings(db: Queryable, userId: string, appId: string): Promise<AppSettingsRow | null> {
  const { rows } = await db.query<AppSettingsRow>(
    `SELECT overrides, updated_at, CASE WHEN stale_at = updated_at THEN stale_keys END AS stale_keys, CASE WHEN stale_at = updated_at THEN stale_schema END AS stale_schema
       FROM app_settings WHERE user_id = $1 AND application_id = $2`,
    [userId, appId],
  );
  return rows[0] ?? null;
}

/** The row's overrides, with their stamp: the keys that do not validate against the schema stamped `stamp.schema`, as of `now`. */
export async function upsertAppSettings(db: Queryable, userId: string, appId: string, overrides: Record<string, unknown>, now: Date, stamp: { keys: string[]; schema: string }): Promise<void> {
  await db.query(
    `INSERT INTO app_settings (user_id, application_id, overrides, updated_at, stale_keys, stale_schema, stale_at) VALUES ($1, $2, $3, $4, $5, $6, $4)
       ON CONFLICT (user_id, application_id) DO UPDATE SET overrides = EXCLUDED.overrides, updated_at = EXCLUDED.updated_at,
         stale_keys = EXCLUDED.stale_keys, stale_schema = EXCLUDED.stale_schema, stale_at = EXCLUDED.stale_at`,
    [userId, appId, JSON.stringify(overrides), now, JSON.stringify(stamp.keys), stamp.schema],
  );
}
