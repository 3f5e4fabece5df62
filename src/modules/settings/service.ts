import { isDeepStrictEqual } from 'node:util';
import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { ApiError, MAX_FIELD_ERRORS, invalidField, validationFailed } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { mergeCustom } from '../../http/patch.js';
import type { Queryable } from '../../db/types.js';
import { holdAccountRight, targetUser } from '../users/access.js';
import { recognizedLocale } from '../profiles/service.js';
import { authorizeAppUserData, CUSTOM_MAX_BYTES, lockUserForAppData } from '../app-access/app-profiles.js';
import { settingsValueErrors, staleOverrideKeys } from '../applications/validation.js';
import { settingsSchemaStamp } from '../applications/stale.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';
import { APP_SETTINGS_READ_ONLY, SETTINGS_READ_ONLY, type AppSettings, type PatchAppSettingsBody, type PatchSettingsBody, type Settings } from './schemas.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { findAppSettings, findSettings, lockProfile, touchProfile, updateSettings, upsertAppSettings, type AppSettingsRow } from './store.js';

async function loadSettings(db: Queryable, userId: string, forUpdate = false): Promise<Settings> {
  const r = await findSettings(db, userId, forUpdate);
  if (!r) throw new ApiError('user_not_found');
  return { ...r, updated_at: r.updated_at.toISOString() };
}

/**
 * An IANA time zone the runtime knows, as the time zone database spells it: a name sent in another
 * case gets the runtime's spelling (europe/paris → Europe/Paris), while a name the runtime resolves to
 * another (its ICU data keeps older links as the IDs: Asia/Kolkata → Asia/Calcutta, Europe/Kyiv →
 * Europe/Kiev) stays the name sent; else 422.
 */
export function recognizedTimeZone(zone: string): string {
  let resolved: string;
  try {
    resolved = new Intl.DateTimeFormat('en', { timeZone: zone }).resolvedOptions().timeZone;
  } catch {
    throw invalidField('timezone', 'is not an IANA time zone the service recognizes');
  }
  return resolved.toLowerCase() === zone.toLowerCase() ? resolved : zone;
}

/** GET /v1/users/{id}/settings: self or users.manage (preferences are not part of what users.list reads). */
export async function getSettings(ctx: Ctx, idParam: string): Promise<Settings> {
  const { user } = await targetUser(ctx, idParam, 'write', { readOnly: true });
  return loadSettings(ctx.db, user.id);
}

/**
 * PATCH /v1/users/{id}/settings: self or users.manage; notifications merge field by field. The locale
 * is the one the Profile shows. As for the Profile, a self-service change writes no audit event and
 * anyone else's writes settings.updated.
 */
export async function patchSettings(ctx: Ctx, idParam: string, body: PatchSettingsBody): Promise<Settings> {
  const { user, self, rightMayMove } = await targetUser(ctx, idParam, 'write');
  assertNoReadOnlyFields(body, SETTINGS_READ_ONLY);
  const timezone = body.timezone !== undefined ? recognizedTimeZone(body.timezone) : undefined;
  const locale = body.locale !== undefined ? recognizedLocale(body.locale) : undefined;
  return ctx.db.transaction(async (tx) => {
    // The user before the Profile, as the erasure cascade takes them.
    await holdAccountRight(tx, ctx, user.id, rightMayMove);
    // The Profile first, as a Profile PATCH locks it before it writes the locale here: a locale change
    // is the Profile's too (its updated_at moves), and one order of locks never deadlocks.
    // The Profile is gone only once the erasure cascade has run (it keeps the global Settings): a write
    // that found the soft-deleted user before the cascade and got here after it is 404, as targetUser
    // answers after it, and leaves no settings.updated row with unredacted snapshots about the erased user.
    if ((await lockProfile(tx, user.id)) === 0) throw new ApiError('user_not_found');
    const before = await loadSettings(tx, user.id, true);
    const next = {
      theme: body.theme ?? before.theme,
      timezone: timezone ?? before.timezone,
      locale: locale ?? before.locale,
      notifications: { ...before.notifications, ...body.notifications },
    };
    const { user_id: _u, updated_at: _t, ...current } = before;
    if (isDeepStrictEqual(next, current)) return before;
    await updateSettings(tx, user.id, next, ctx.now);
    if (next.locale !== before.locale) await touchProfile(tx, user.id, ctx.now);
    const after = await loadSettings(tx, user.id);
    if (!self) await recordAudit(tx, inTx(ctx, tx), { action: 'settings.updated', target: { type: 'settings', id: user.id }, targetUserId: user.id, before, after });
    return after;
  });
}

const shape = (userId: string, appId: string, row: AppSettingsRow | null): AppSettings => ({
  user_id: userId,
  application_id: appId,
  overrides: row?.overrides ?? {},
  updated_at: row?.updated_at.toISOString() ?? null,
});

/** GET /v1/users/{id}/apps/{appId}/settings: the AppProfile's callers; without a record, no overrides and nothing written. */
export async function getAppSettings(ctx: Ctx, idParam: string, appId: string): Promise<AppSettings> {
  const { user, app } = await authorizeAppUserData(ctx, idParam, appId);
  return shape(user.id, app.id, await findAppSettings(ctx.db, user.id, app.id));
}

/**
 * The stale keys of the overrides written (stale_override_counts counts them): the values just set
 * validated; a key kept from the row keeps its judgment when the row's stamp is for this schema, else
 * the whole row is judged.
 */
function staleStamp(schema: Record<string, unknown>, row: AppSettingsRow | null, overrides: Record<string, unknown>, set: Record<string, unknown>) {
  const stamp = settingsSchemaStamp(schema);
  const kept = row?.stale_keys && row.stale_schema === stamp ? row.stale_keys.filter((k) => Object.hasOwn(overrides, k) && !Object.hasOwn(set, k)) : null;
  return { keys: kept ?? staleOverrideKeys(schema, overrides), schema: stamp };
}

const overridesTooLarge = () => invalidField('overrides', 'must serialize to at most 16 KB');

/**
 * PATCH /v1/users/{id}/apps/{appId}/settings: overrides merge one level deep (null removes a key);
 * every value set must be a property of the Application's settings_schema and validate against it
 * (422 validation_failed naming `overrides.<key>`); at most 16 KB, like AppProfile custom (the values
 * sent are measured first: beyond it they are refused on their size alone). Values
 * stored earlier that a later schema no longer accepts stay until changed (counted in the
 * Application's settings_schema_stats.stale_override_counts).
 */
export async function patchAppSettings(ctx: Ctx, idParam: string, appId: string, body: PatchAppSettingsBody): Promise<AppSettings> {
  const { user, app, self } = await authorizeAppUserData(ctx, idParam, appId);
  assertNoReadOnlyFields(body, APP_SETTINGS_READ_ONLY);
  const values = Object.fromEntries(Object.entries(body.overrides).filter(([, v]) => v !== null));
  // The values set all end up stored: more than 16 KB of them is refused before the schema checks them,
  // work that grows with their size times the schema's (1 MB against an anyOf of 1,000 names: gigabytes).
  if (Buffer.byteLength(JSON.stringify(values)) > CUSTOM_MAX_BYTES) throw overridesTooLarge();
  const errors = settingsValueErrors(app.settings_schema, values);
  if (errors.length) throw validationFailed(...errors.slice(0, MAX_FIELD_ERRORS).map((e) => ({ path: `overrides.${e.key}`, message: e.message })));
  return ctx.db.transaction(async (tx) => {
    // AppSettings are the Application's Tenant's data: unchanged while that Tenant is migrating.
    await assertAppTenantWritable(tx, app.id);
    await lockUserForAppData(tx, ctx, user.id, app.id);
    const row = await findAppSettings(tx, user.id, app.id);
    const overrides = mergeCustom(row?.overrides ?? {}, body.overrides);
    if (Buffer.byteLength(JSON.stringify(overrides)) > CUSTOM_MAX_BYTES) throw overridesTooLarge();
    if (row && isDeepStrictEqual(overrides, row.overrides)) return shape(user.id, app.id, row);
    await upsertAppSettings(tx, user.id, app.id, overrides, ctx.now, staleStamp(app.settings_schema, row, overrides, values));
    const after = shape(user.id, app.id, await findAppSettings(tx, user.id, app.id));
    if (!self) {
      await recordAudit(tx, inTx(ctx, tx), {
        action: 'settings.updated', target: { type: 'app_settings', id: `${user.id}:${app.id}` }, targetUserId: user.id, applicationId: app.id,
        before: shape(user.id, app.id, row), after,
      });
    }
    return after;
  });
}
