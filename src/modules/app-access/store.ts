import type { Queryable } from '../../db/types.js';

/** A user's AppProfile record for one Application. */
export interface AppProfileRow {
  display_handle: string | null;
  custom: Record<string, unknown>;
  updated_at: Date;
}

/**
 * The user's Profile display name and, when the record exists, their AppProfile for the Application
 * (its columns are null without one); undefined when the user has no Profile.
 */
export async function findAppProfile(
  db: Queryable,
  userId: string,
  appId: string,
): Promise<(AppProfileRow & { display_name: string }) | undefined> {
  const { rows } = await db.query<AppProfileRow & { display_name: string }>(
    `SELECT ap.display_handle, ap.custom, ap.updated_at, p.display_name
       FROM profiles p LEFT JOIN app_profiles ap ON ap.user_id = p.user_id AND ap.application_id = $2
      WHERE p.user_id = $1`,
    [userId, appId],
  );
  return rows[0];
}

/** Creates the record, or replaces its handle, custom and updated_at. */
export async function upsertAppProfile(
  db: Queryable,
  userId: string,
  appId: string,
  handle: string | null,
  customJson: string,
  now: Date,
): Promise<void> {
  await db.query(
    `INSERT INTO app_profiles (user_id, application_id, display_handle, custom, updated_at) VALUES ($1, $2, $3, $4, $5)
       ON CONFLICT (user_id, application_id) DO UPDATE SET display_handle = EXCLUDED.display_handle, custom = EXCLUDED.custom, updated_at = EXCLUDED.updated_at`,
    [userId, appId, handle, customJson, now],
  );
}
