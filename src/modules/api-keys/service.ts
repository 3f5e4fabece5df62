import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import type { Tx } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { hashSecret, newId, newSecret } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { keyset, toPage } from '../../http/pagination.js';
import { PLATFORM_PERMISSIONS } from '../../http/meta.js';
import { API_KEY_PREFIX } from '../../auth/credentials.js';
import { findApplication, isApplicationOwner } from '../../access/ownership.js';
import { findKey, insertKey, keyListConditions, listKeyRows, lockKey, toApiKey, updateKey, updateKeyRevoked, updateKeySecret, type KeyRow } from './store.js';
import { KEY_READ_ONLY, type ApiKey, type CreateKeyBody, type KeyListQuery, type PatchKeyBody } from './schemas.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { refusalFor } from '../applications/service.js';
import { lockApplicationTenant } from '../tenancy/store.js';

/** The platform permissions an app-scoped key may hold; they act only on its own Application. */
export const APP_CONFINED_PERMISSIONS = ['entitlements.manage', 'users.list', 'roles.manage', 'audit.view'];
const PLATFORM = new Set<string>(PLATFORM_PERMISSIONS);

function callerId(ctx: Ctx): string {
  if (ctx.actor.type !== 'user') throw new ApiError('user_token_required');
  return ctx.actor.userId;
}

const notKeyManager = () => new ApiError('forbidden', { message: "Only the Application's owner or api_keys.manage may manage its keys." });

/** Platform keys: api_keys.manage. App keys: api_keys.manage or the Application's owner. */
async function assertMayManageScope(ctx: Ctx, scope: string): Promise<void> {
  if (hasPermission(ctx.actor, 'api_keys.manage')) {
    if (scope !== 'platform' && !(await findApplication(ctx.db, scope))) throw new ApiError('application_not_found');
    return;
  }
  if (scope === 'platform') throw new ApiError('forbidden', { details: { required_permission: 'api_keys.manage' } });
  if (!(await findApplication(ctx.db, scope))) throw new ApiError('application_not_found');
  if (!(await isApplicationOwner(ctx.db, callerId(ctx), scope))) {
    // 403 only to a caller who may see the Application: for anyone else it is as unknown (404).
    throw await refusalFor(ctx, scope, notKeyManager());
  }
}

/**
 * An Application owner's right over its keys, read again inside the write's transaction under a KEY
 * SHARE lock of the Application, which an ownership move (FOR UPDATE) waits for or has committed
 * before: an owner who lost the Application meanwhile gets `refusal` (what a stranger gets) and
 * nothing is written. api_keys.manage keeps its right; platform keys need it.
 */
async function assertOwnershipHeld(ctx: Ctx, tx: Tx, scope: string, refusal: () => Promise<unknown>): Promise<void> {
  if (scope === 'platform' || hasPermission(ctx.actor, 'api_keys.manage')) return;
  await lockApplicationTenant(tx, scope);
  if (!(await isApplicationOwner(tx, callerId(ctx), scope))) throw await refusal();
}

const keyNotFound = async () => new ApiError('api_key_not_found');

/** The errors table's message speaks of a Role's scope; a key's permissions fit the key's scope. */
const unknownKeyPermission = (permissions: string[]) =>
  new ApiError('unknown_permission', { message: "A permission is not valid for the key's scope.", details: { permissions } });

/** 403 role_escalation_forbidden naming the permissions the caller may not hand out, if any. */
function refuseUnheld(missing: string[]): void {
  if (missing.length) throw new ApiError('role_escalation_forbidden', { details: { permissions: missing } });
}

/** Permission lists must fit the scope; a platform key may hold only what its creator holds. */
async function assertPermissions(ctx: Ctx, scope: string, permissions: string[]): Promise<void> {
  if (scope === 'platform') {
    const unknown = permissions.filter((p) => !PLATFORM.has(p));
    if (unknown.length) throw unknownKeyPermission(unknown);
    return refuseUnheld(permissions.filter((p) => !hasPermission(ctx.actor, p)));
  }
  const app = (await findApplication(ctx.db, scope))!;
  const declared = new Set(app.permissions.map((p) => p.key));
  const unknown = permissions.filter((p) => !APP_CONFINED_PERMISSIONS.includes(p) && !(p.startsWith(`app.${app.slug}.`) && declared.has(p)));
  if (unknown.length) throw unknownKeyPermission(unknown);
  refuseUnheld(await unheldByNonOwner(ctx, scope, permissions));
}

/** The app-confined permissions on an app key that the caller does not hold platform-wide. */
const unheldConfined = (ctx: Ctx, permissions: string[]) => permissions.filter((p) => APP_CONFINED_PERMISSIONS.includes(p) && !hasPermission(ctx.actor, p));

/**
 * The platform permissions on an app key (entitlements.manage, users.list, roles.manage, audit.view,
 * confined to its Application) that the caller does not hold, unless the caller owns the
 * Application, whose owner rights cover them. api_keys.manage alone would otherwise mint a key with
 * powers over an Application that its holder has not (Part A's escalation rule, applied to app keys).
 */
async function unheldByNonOwner(ctx: Ctx, scope: string, permissions: string[]): Promise<string[]> {
  const unheld = unheldConfined(ctx, permissions);
  if (unheld.length === 0 || (await isApplicationOwner(ctx.db, callerId(ctx), scope))) return [];
  return unheld;
}

/**
 * An api_keys.manage holder giving or handed an app key's `permissions` (create, a permissions PATCH,
 * lifting restrict_destructive, rotate) has the app-confined ones they lack covered by owning the
 * Application: that ownership must be read under the Application's KEY SHARE lock (as
 * assertOwnershipHeld does for a mere owner), so a former owner whose Application moved meanwhile gets
 * a non-owner's 403 role_escalation_forbidden. Takes that lock when it is needed and says whether it
 * did; permissions all the caller's own take no lock.
 */
async function lockForOwnerCover(ctx: Ctx, tx: Tx, scope: string, permissions: string[]): Promise<boolean> {
  if (scope === 'platform' || !hasPermission(ctx.actor, 'api_keys.manage') || unheldConfined(ctx, permissions).length === 0) return false;
  await lockApplicationTenant(tx, scope);
  return true;
}

/** lockForOwnerCover, then the ownership read again under that lock. */
async function assertOwnerCoverHeld(ctx: Ctx, tx: Tx, scope: string, permissions: string[]): Promise<void> {
  if (await lockForOwnerCover(ctx, tx, scope, permissions)) refuseUnheld(await unheldByNonOwner(inTx(ctx, tx), scope, permissions));
}

/**
 * A key's powers are handed to a caller only if the caller holds every permission on it (an app
 * key's: unless the caller owns the Application), 403 role_escalation_forbidden as on create:
 * lifting restrict_destructive, and rotation, whose new secret is the key's permissions in the
 * caller's hands (catalog AZ-7: no platform key with unheld permissions). Runs inside change(): a
 * caller without api_keys.manage has had their ownership read under the Application's lock there.
 */
async function assertHoldsKeyPermissions(ctx: Ctx, tx: Tx, key: KeyRow): Promise<void> {
  if (key.scope !== 'platform') return assertOwnerCoverHeld(ctx, tx, key.scope, key.permissions);
  refuseUnheld(key.permissions.filter((p) => !hasPermission(ctx.actor, p)));
}

async function visibleKey(ctx: Ctx, id: string): Promise<KeyRow> {
  const key = await findKey(ctx.db, id);
  // Test credentials see only test keys (Part A convention 10); live ones manage both.
  if (!key || (ctx.mode === 'test' && !key.test_mode)) throw new ApiError('api_key_not_found');
  if (hasPermission(ctx.actor, 'api_keys.manage')) return key;
  if (key.scope !== 'platform' && (await isApplicationOwner(ctx.db, callerId(ctx), key.scope))) return key;
  throw new ApiError('api_key_not_found');
}

/** POST /v1/api-keys: the secret is returned here once and stored only as a hash. */
export async function createKey(ctx: Ctx, body: CreateKeyBody): Promise<ApiKey & { secret: string }> {
  const userId = callerId(ctx);
  await assertMayManageScope(ctx, body.scope);
  await assertPermissions(ctx, body.scope, body.permissions);
  // Kept to the millisecond, as the API shows it and compares it: stored as sent, PostgreSQL's
  // microseconds would leave a key listed as active past the expires_at it shows (and 401 there).
  const expiresAt = body.expires_at ? new Date(body.expires_at) : null;
  if (expiresAt && expiresAt <= ctx.now) throw invalidField('expires_at', 'must be in the future');
  const mode = body.mode ?? 'live';
  // A test credential never mints a live key: that would be a way out of test mode.
  if (ctx.mode === 'test' && mode === 'live') throw new ApiError('forbidden', { message: 'A test-mode caller creates test keys only.', details: { field: 'mode' } });
  const intendedUse = body.intended_use ?? 'service';
  const secret = newSecret(API_KEY_PREFIX[mode]);
  const id = newId('key');
  return ctx.db.transaction(async (tx) => {
    await assertOwnershipHeld(ctx, tx, body.scope, () => refusalFor(inTx(ctx, tx), body.scope, notKeyManager()));
    await assertOwnerCoverHeld(ctx, tx, body.scope, body.permissions);
    const row = await insertKey(tx, {
      id, name: body.name, scope: body.scope, permissions: body.permissions, testMode: mode === 'test', intendedUse,
      restrictDestructive: body.restrict_destructive ?? intendedUse === 'agent', secretHash: hashSecret(secret), secretHint: secret.slice(-4),
      expiresAt, createdByUserId: userId, now: ctx.now,
    });
    const key = toApiKey(row);
    const audit = { target: { type: 'api_key', id }, after: key, applicationId: scopeApp(key.scope) };
    await recordAudit(tx, inTx(ctx, tx), { action: 'api_key.created', ...audit });
    // An agent key created without the restriction is audited like turning it off later (Part A, Authentication 5).
    if (intendedUse === 'agent' && !key.restrict_destructive) await recordAudit(tx, inTx(ctx, tx), { action: 'api_key.restrict_destructive_disabled', ...audit });
    return { ...key, secret };
  });
}

const scopeApp = (scope: string) => (scope === 'platform' ? null : scope);

/** GET /v1/api-keys: keys in scope for the caller; revoked and expired ones only with include_inactive. */
export async function listKeys(ctx: Ctx, q: KeyListQuery) {
  const userId = callerId(ctx);
  const conditions = keyListConditions({
    ownedBy: hasPermission(ctx.actor, 'api_keys.manage') ? null : userId,
    scope: q.scope,
    mode: q.mode,
    testOnly: ctx.mode === 'test',
    intendedUse: q.intended_use,
    activeAt: q.include_inactive ? null : ctx.now,
  });
  const ks = keyset(q, conditions.params.length + 1);
  const rows = await listKeyRows(ctx.db, conditions, ks);
  return toPage(rows, ks.limit, toApiKey);
}

export async function getKey(ctx: Ctx, id: string): Promise<ApiKey> {
  callerId(ctx);
  return toApiKey(await visibleKey(ctx, id));
}

async function change(ctx: Ctx, id: string, fn: (tx: Tx, key: KeyRow) => Promise<KeyRow>): Promise<KeyRow> {
  const key = await visibleKey(ctx, id);
  await assertMayManageScope(ctx, key.scope);
  // An expired key behaves as revoked (Part A, API Key expires_at).
  if (key.revoked_at || (key.expires_at && key.expires_at <= ctx.now)) throw new ApiError('api_key_revoked');
  return ctx.db.transaction(async (tx) => {
    // Locked and read again: a revocation committed meanwhile is seen (409, no rotation of a revoked
    // key, no audit row after api_key.revoked), and a concurrent change is the starting point.
    const locked = (await lockKey(tx, id))!;
    await assertOwnershipHeld(ctx, tx, locked.scope, keyNotFound);
    if (locked.revoked_at) throw new ApiError('api_key_revoked');
    return fn(tx, locked);
  });
}

/** PATCH /v1/api-keys/{id}: name, permissions, restrict_destructive. */
export async function patchKey(ctx: Ctx, id: string, body: PatchKeyBody): Promise<ApiKey> {
  const updated = await change(ctx, id, async (tx, key) => {
    assertNoReadOnlyFields(body, KEY_READ_ONLY);
    if (body.permissions) {
      // Under the lock an ownership cover needs, so that the check's one ownership read is the locked one.
      await lockForOwnerCover(ctx, tx, key.scope, body.permissions);
      await assertPermissions(inTx(ctx, tx), key.scope, body.permissions);
    }
    if (body.restrict_destructive === false && key.restrict_destructive) await assertHoldsKeyPermissions(ctx, tx, key);
    // A PATCH that changes nothing writes nothing (no updated_at, no audit row).
    const samePermissions = !body.permissions || (new Set(body.permissions).size === new Set(key.permissions).size && body.permissions.every((p) => key.permissions.includes(p)));
    if ((body.name === undefined || body.name === key.name) && samePermissions && (body.restrict_destructive === undefined || body.restrict_destructive === key.restrict_destructive)) return key;
    const row = await updateKey(tx, key.id, { name: body.name ?? null, permissions: body.permissions ?? null, restrictDestructive: body.restrict_destructive ?? null }, ctx.now);
    const c = inTx(ctx, tx);
    const audit = { target: { type: 'api_key', id: key.id }, applicationId: scopeApp(key.scope), before: toApiKey(key), after: toApiKey(row) };
    await recordAudit(tx, c, { action: 'api_key.updated', ...audit });
    if (key.intended_use === 'agent' && key.restrict_destructive && body.restrict_destructive === false) {
      await recordAudit(tx, c, { action: 'api_key.restrict_destructive_disabled', ...audit });
    }
    return row;
  });
  return toApiKey(updated);
}

/** POST /v1/api-keys/{id}/rotate: a new secret on the same record; the old one stops working at once. */
export async function rotateKey(ctx: Ctx, id: string): Promise<ApiKey & { secret: string }> {
  let secret = '';
  const rotated = await change(ctx, id, async (tx, key) => {
    await assertHoldsKeyPermissions(ctx, tx, key);
    secret = newSecret(API_KEY_PREFIX[key.test_mode ? 'test' : 'live']);
    const row = await updateKeySecret(tx, key.id, hashSecret(secret), secret.slice(-4), ctx.now);
    await recordAudit(tx, inTx(ctx, tx), { action: 'api_key.rotated', target: { type: 'api_key', id: key.id }, applicationId: scopeApp(key.scope) });
    return row;
  });
  return { ...toApiKey(rotated), secret };
}

/** DELETE /v1/api-keys/{id}: revoked permanently; repeating it changes nothing. */
export async function revokeKey(ctx: Ctx, id: string): Promise<void> {
  const key = await visibleKey(ctx, id);
  await assertMayManageScope(ctx, key.scope);
  if (key.revoked_at) return;
  await ctx.db.transaction(async (tx) => {
    // The key locked first (a change under way finishes), then the caller's right read under it.
    await lockKey(tx, key.id);
    await assertOwnershipHeld(ctx, tx, key.scope, keyNotFound);
    if ((await updateKeyRevoked(tx, key.id, ctx.now)) === 1) await recordAudit(tx, inTx(ctx, tx), { action: 'api_key.revoked', target: { type: 'api_key', id: key.id }, applicationId: scopeApp(key.scope) });
  });
}
