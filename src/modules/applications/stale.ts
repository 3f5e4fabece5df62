import { createHash } from 'node:crypto';
import type { Ctx } from '../../context.js';
import type { Queryable } from '../../db/types.js';
import { countStampedStaleKeys, listUnstampedOverrides, lockAppSettingsOf, restampAppSettings } from '../settings/stale-store.js';
import type { ApplicationRow } from './store.js';
import { staleOverrideKeys } from './validation.js';

// settings_schema_stats.stale_override_counts (Part B: "maps key to number of users holding overrides
// that no longer validate"). Each AppSettings row carries the keys of its overrides that do not validate
// against a schema, stamped with that schema and the row's updated_at (migration 0041): judged when the
// overrides are written (they are checked then) and, for every row of the Application, when its
// settings_schema changes. A read counts the stamped rows with one aggregate and judges only the rows
// whose stamp does not hold (written before 0041, or by the release before it during a deploy).

/** The stamp of a settings_schema: the sha256 of its text as read from the database (jsonb orders its keys). */
export const settingsSchemaStamp = (schema: Record<string, unknown>): string => createHash('sha256').update(JSON.stringify(schema)).digest('base64');

/** Per key, the users of the caller's mode holding overrides the Application's settings_schema no longer accepts. */
export async function staleCounts(ctx: Ctx, app: ApplicationRow): Promise<Record<string, number>> {
  // No shortcut for an empty settings_schema: it accepts no key, so every override stored under an
  // earlier schema is stale and counted (a PATCH of one answers 422).
  const stamp = settingsSchemaStamp(app.settings_schema);
  // Counted in a Map: a key is any name a schema declared (`constructor`, `toString`), and on a plain
  // object those would start from what Object.prototype holds under that name.
  const counts = new Map<string, number>();
  for (const { key, n } of await countStampedStaleKeys(ctx.db, app.id, stamp)) counts.set(key, n);
  for (const r of await listUnstampedOverrides(ctx.db, app.id, stamp)) {
    for (const key of staleOverrideKeys(app.settings_schema, r.overrides)) counts.set(key, (counts.get(key) ?? 0) + 1);
  }
  return Object.fromEntries(counts);
}

/**
 * After a change of the Application's settings_schema, in its transaction: every user's row (both
 * modes) judged against the new schema and stamped. The rows are locked first, so an AppSettings write
 * waits and then stamps its own row.
 */
export async function restampSettingsOverrides(tx: Queryable, app: ApplicationRow): Promise<void> {
  const rows = await lockAppSettingsOf(tx, app.id);
  const stale = rows.map((r) => ({ user_id: r.user_id, keys: staleOverrideKeys(app.settings_schema, r.overrides) })).filter((r) => r.keys.length);
  await restampAppSettings(tx, app.id, settingsSchemaStamp(app.settings_schema), stale);
}
