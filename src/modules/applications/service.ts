import type { Ctx } from '../../context.js';
import { hasPermission, inTx } from '../../context.js';
import { modeOf, type Tx } from '../../db/types.js';
import { ApiError, invalidField } from '../../errors.js';
import { recordAudit } from '../../audit/record.js';
import { findRole, toRole } from '../roles/store.js';
import { emit } from '../../outbox/emit.js';
import { keyset, toPage } from '../../http/pagination.js';
import { assertWithinPlan, countTenantApplications, findTenant, resolveOwnerTenant } from '../tenancy/plans.js';
import { findApplicationRow, insertApplication, isKnownOrganization, isKnownUser, toApplication, toListItem, type ApplicationRow } from './store.js';
import { insertAppRole } from './app-roles-store.js';
import type { Application, ApplicationListQuery, CreateApplicationBody } from './schemas.js';
import { viewerOf } from './visibility.js';
import { applicationListWhere, findVisibleApplicationRow, isApplicationKnownTo, listApplicationRows } from './visibility-store.js';
import { isApplicationOwner } from '../../access/ownership.js';
import { staleCounts } from './stale.js';
import { validateHttpsUrl, validatePermissions, validateSettingsSchema, validateSlug, validateWebUrl } from './validation.js';
import { validateRedirectUris } from './redirect-uris.js';
import { assertTenantWritable } from '../tenancy/writable.js';

/** The Application if the caller may see it; else 404 application_not_found. */
export async function visibleApplication(ctx: Ctx, id: string): Promise<ApplicationRow> {
  const app = await findVisibleApplication(ctx, id);
  if (!app) throw new ApiError('application_not_found');
  return app;
}

/** The Application if the caller may see it (Part B visibility), else null. */
export async function findVisibleApplication(ctx: Ctx, id: string): Promise<ApplicationRow | null> {
  return findVisibleApplicationRow(ctx.db, id, viewerOf(ctx));
}

/**
 * Part B: "An unauthorized reader of a scoped resource gets 404 to avoid revealing existence." A
 * refusal about an Application a user asks to use (not approved, its Tenant suspended, no access, its
 * redirect_uris) goes only to a caller who may see it or holds an access path to it (any status);
 * anyone else gets 404 application_not_found, the answer for an unknown id, so these refusals neither
 * confirm an internal or unapproved Application nor show its review_status. Runs on refusals only.
 */
export async function refusalFor(ctx: Ctx, appId: string, refusal: unknown): Promise<unknown> {
  if (!(refusal instanceof ApiError) || refusal.code === 'application_not_found' || refusal.status >= 500) return refusal;
  return (await isApplicationKnownTo(ctx.db, appId, viewerOf(ctx))) ? refusal : new ApiError('application_not_found');
}

/** The caller owns the Application and so holds owner rights over it: never over an internal one (Part B visibility). */
export async function isOwner(ctx: Ctx, app: ApplicationRow): Promise<boolean> {
  if (ctx.actor.type !== 'user' || app.visibility === 'internal') return false;
  return isApplicationOwner(ctx.db, ctx.actor.userId, app.id);
}

export async function getApplication(ctx: Ctx, id: string): Promise<Application> {
  const app = await visibleApplication(ctx, id);
  return toApplication(app, await staleCounts(ctx, app));
}

/** GET /v1/applications: the trimmed catalog the caller may see; pending_review for applications.manage is the queue, oldest first. */
export async function listApplications(ctx: Ctx, q: ApplicationListQuery) {
  const viewer = viewerOf(ctx);
  if ((q.tenant_id || q.owner_user_id || q.owner_organization_id) && !viewer.admin && !hasPermission(ctx.actor, 'tenants.manage')) {
    throw new ApiError('forbidden', { message: 'tenant_id and owner filters need applications.manage or tenants.manage.' });
  }
  // Nothing to list, but the cursor is still checked (docs/conventions.md, Pagination).
  if (q.owned && !viewer.userId) return toPage([], keyset(q, 1).limit, toListItem);
  const filter = applicationListWhere(viewer, q);
  const queue = viewer.admin && q.review_status === 'pending_review';
  const ks = keyset(q, filter.params.length + 1, 'a', queue ? 'asc' : 'desc');
  return toPage(await listApplicationRows(ctx.db, filter, ks), ks.limit, toListItem);
}

export interface ConfigInput {
  name?: string;
  description?: string | null;
  icon_url?: string | null;
  launch_url?: string;
  redirect_uris?: string[];
  support_url?: string | null;
  email_from_name?: string | null;
  settings_schema?: Record<string, unknown>;
  permissions?: { key: string; description?: string }[];
  available_app_roles?: string[];
  default_app_role?: string | null;
}

/** Field rules shared by create and PATCH; returns normalized permissions. */
export function validateConfig(slug: string, testMode: boolean, input: ConfigInput, availableRoles: string[], defaultRole: string | null) {
  validateHttpsUrl('launch_url', input.launch_url);
  validateWebUrl('icon_url', input.icon_url);
  validateWebUrl('support_url', input.support_url, { mailto: true });
  if (input.redirect_uris) validateRedirectUris(input.redirect_uris, testMode);
  if (input.settings_schema) validateSettingsSchema(input.settings_schema);
  if (defaultRole !== null && !availableRoles.includes(defaultRole)) throw invalidField('default_app_role', 'must be one of available_app_roles');
  return input.permissions ? validatePermissions(slug, input.permissions) : undefined;
}

/**
 * The owner named on create or on an ownership change exists, in the Application's mode; a deleted or
 * erased user is not a known user (422). A live Application is never handed to a test User or
 * Organization, nor the reverse: a test-mode key could otherwise take a live Application out of its
 * live owner's hands by naming a test user it made.
 */
export async function assertOwnerKnown(tx: Tx, owner: { userId?: string | null; organizationId?: string | null }, testMode: boolean): Promise<void> {
  if (owner.userId) {
    if (!(await isKnownUser(tx, owner.userId, testMode))) throw invalidField('owner_user_id', `is not a known ${testMode ? 'test-mode' : 'live'} user (the Application's mode)`);
  } else {
    if (!(await isKnownOrganization(tx, owner.organizationId, testMode))) throw invalidField('owner_organization_id', `is not a known ${testMode ? 'test-mode' : 'live'} organization (the Application's mode)`);
  }
}

/** Seeds the empty Role role_<slug>_<name> for an available_app_roles name. */
export async function seedAppRole(tx: Tx, ctx: Ctx, app: { id: string; slug: string; test_mode: boolean }, name: string, tenantId?: string): Promise<void> {
  const id = `role_${app.slug}_${name}`;
  const rowCount = await insertAppRole(tx, id, name, app.id, ctx.now);
  // A seeded Role is audited as role.created, as one made through POST /v1/roles. A PATCH moving the
  // Application names the Tenant it ends up in (its row still names the old one until the UPDATE).
  // Of the Application's mode, as the PATCH's other rows, whoever seeds it.
  if (rowCount === 1) await recordAudit(tx, inTx(ctx, tx), { action: 'role.created', target: { type: 'role', id }, applicationId: app.id, tenantId, after: toRole((await findRole(tx, id))!), mode: modeOf(app.test_mode) });
}

/** POST /v1/applications (applications.manage): creates approved, resolving or creating the owner's Tenant. */
export async function createApplication(ctx: Ctx, body: CreateApplicationBody): Promise<Application> {
  validateSlug(body.slug);
  if (!!body.owner_user_id === !!body.owner_organization_id) throw invalidField('owner_user_id', 'exactly one of owner_user_id or owner_organization_id is required');
  const testMode = ctx.mode === 'test';
  const roles = body.available_app_roles ?? [];
  const permissions = validateConfig(body.slug, testMode, body, roles, body.default_app_role ?? null) ?? [];
  return ctx.db.transaction(async (tx) => {
    await assertOwnerKnown(tx, { userId: body.owner_user_id, organizationId: body.owner_organization_id }, testMode);
    const tenant = await resolveOwnerTenant(tx, { userId: body.owner_user_id, organizationId: body.owner_organization_id }, ctx.now);
    // Read after the Tenant lock: a creation of the same slug in this Tenant that held it has committed
    // by now, so the collision is slug_taken, as one after the other, not the plan cap it filled.
    if (await findApplicationRow(tx, `app_${body.slug}`)) throw new ApiError('slug_taken');
    await assertTenantWritable(tx, tenant.id);
    assertWithinPlan(tenant, 'applications', (await countTenantApplications(tx, tenant.id)) + 1);
    if (roles.length > 0) assertWithinPlan(tenant, 'app_roles', roles.length, 0);
    const id = `app_${body.slug}`;
    await insertApplication(tx, {
      id, slug: body.slug, name: body.name, description: body.description ?? null, icon_url: body.icon_url ?? null, launch_url: body.launch_url,
      redirect_uris: body.redirect_uris ?? [], support_url: body.support_url ?? null, email_from_name: body.email_from_name ?? null,
      settings_schema: body.settings_schema ?? {}, permissions, available_app_roles: roles, default_app_role: body.default_app_role ?? null,
      visibility: body.visibility ?? 'public', owner_user_id: body.owner_user_id ?? null, owner_organization_id: body.owner_organization_id ?? null,
      tenant_id: tenant.id, test_mode: testMode,
    }, ctx.now);
    const app = (await findApplicationRow(tx, id))!;
    for (const name of roles) await seedAppRole(tx, ctx, app, name);
    const out = toApplication(app);
    await recordAudit(tx, inTx(ctx, tx), { action: 'application.created', target: { type: 'application', id }, applicationId: id, tenantId: tenant.id, after: out });
    return out;
  });
}

/**
 * application.review_status_changed is an event of the Application's mode, whoever moderates it:
 * Applications are shared by both modes (Part A convention 10), and the move is as real for a live
 * Application when a test-mode key makes it (it stops new grants and app tokens) as for a test_mode one
 * when a live admin does. Written in the caller's mode (until 2026-11-29), it never reached the
 * Application's own subscriptions (nor any other of its mode) and reached the other mode's instead.
 */
export async function emitReviewChange(tx: Tx, ctx: Ctx, app: ApplicationRow): Promise<void> {
  await emit(tx, ctx, {
    type: 'application.review_status_changed',
    mode: modeOf(app.test_mode),
    applicationId: app.id,
    data: { application_id: app.id, review_status: app.review_status, review_notes: app.review_notes },
  });
}

export { findTenant };
