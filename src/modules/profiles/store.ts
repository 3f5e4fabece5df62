import type { Queryable } from '../../db/types.js';

export interface ProfileRow {
  user_id: string;
  display_name: string;
  avatar_url: string | null;
  contact_email: string | null;
  contact_phone: string | null;
  locale: string;
  updated_at: Date;
}

/** The Profile's row with the Settings locale (the Profile mirrors it); null when there is none. */
export async function findProfile(db: Queryable, userId: string): Promise<ProfileRow | null> {
  const { rows } = await db.query<ProfileRow>(
    `SELECT p.user_id, p.display_name, p.avatar_url, p.contact_email, p.contact_phone, s.locale, p.updated_at
       FROM profiles p JOIN settings s ON s.user_id = p.user_id WHERE p.user_id = $1`,
    [userId],
  );
  return rows[0] ?? null;
}

/** Holds the Profile's row until the transaction ends; its row count (0: no Profile). */
export async function lockProfile(db: Queryable, userId: string): Promise<number> {
  const { rowCount } = await db.query('SELECT 1 FROM profiles WHERE user_id = $1 FOR UPDATE', [userId]);
  return rowCount;
}

export interface ProfileFields {
  display_name: string;
  avatar_url: string | null;
  contact_email: string | null;
  contact_phone: string | null;
}

export async function updateProfile(db: Queryable, userId: string, p: ProfileFields, now: Date): Promise<void> {
  await db.query(
    `UPDATE profiles SET display_name = $2, avatar_url = $3, contact_email = $4, contact_phone = $5, updated_at = $6 WHERE user_id = $1`,
    [userId, p.display_name, p.avatar_url, p.contact_email, p.contact_phone, now],
  );
}

/** The Settings locale, which the Profile shows: a Profile PATCH of the locale writes it there. */
export async function updateSettingsLocale(db: Queryable, userId: string, locale: string, now: Date): Promise<void> {
  await db.query('UPDATE settings SET locale = $2, updated_at = $3 WHERE user_id = $1', [userId, locale, now]);
}
