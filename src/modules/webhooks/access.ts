import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import type { Queryable, Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { findApplication, isApplicationOwner } from '../../access/ownership.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';
import {
  findApplicationTenantId,
  findKeyCreator,
  findSubscription,
  findVisibleSubscription,
  type SubscriptionRow,
  type WebhookViewer,
} from './store.js';

export { visibleCondition, type WebhookViewer } from './store.js';

export function webhookViewer(ctx: Ctx): WebhookViewer {
  const keyApp = ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null;
  return {
    manage: hasPermission(ctx.actor, 'webhooks.manage') && !keyApp,
    keyApp,
    userId: ctx.actor.type === 'user' ? ctx.actor.userId : null,
  };
}

/**
 * The subscription if the caller may see it; others' subscriptions are 404 webhook_not_found. A
 * write holds the row first and then calls this in a statement of its own (lockVisibleSubscription,
 * shareVisibleSubscription), so the right it reads is the one committed when the lock was granted.
 */
export async function visibleSubscription(ctx: Ctx, id: string, db: Queryable = ctx.db): Promise<SubscriptionRow> {
  const viewer = webhookViewer(ctx);
  const sub = await findVisibleSubscription(db, viewer, id);
  if (!sub) throw new ApiError('webhook_not_found');
  return sub;
}

/**
 * A write's hold on a subscription: the row FOR UPDATE, then the caller's right to it read under that
 * lock (a statement of its own, so it sees what committed while the write waited: an owner who lost
 * the Application to an ownership move meanwhile gets 404 webhook_not_found, as a stranger does),
 * then its Tenant writable.
 */
export async function lockVisibleSubscription(ctx: Ctx, tx: Tx, id: string): Promise<SubscriptionRow> {
  const sub = await findSubscription(tx, id, 'FOR UPDATE');
  if (!sub) throw new ApiError('webhook_not_found');
  await visibleSubscription(ctx, id, tx);
  if (sub.application_id) await assertAppTenantWritable(tx, sub.application_id);
  return sub;
}

/**
 * A test call's or redelivery's hold on a subscription: the row FOR KEY SHARE until commit (a DELETE
 * meanwhile waits and drops the new delivery with the rest, or went first: 404), then the caller's
 * right read under that lock in a statement of its own, as a write reads it (lockVisibleSubscription).
 */
export async function shareVisibleSubscription(ctx: Ctx, tx: Tx, id: string): Promise<SubscriptionRow> {
  const sub = await findSubscription(tx, id, 'FOR KEY SHARE');
  if (!sub) throw new ApiError('webhook_not_found');
  await visibleSubscription(ctx, id, tx);
  return sub;
}

export interface CreateScope {
  scope: string;
  applicationId: string | null;
  /** Mailed when a platform-scope subscription is disabled: the creating user or the key's creator. */
  createdByUserId: string | null;
}

const forbidden = (message: string) => new ApiError('forbidden', { message });
const notPermitted = () => new ApiError('forbidden', { details: { required_permission: 'webhooks.manage' } });
// Part B lists what each caller passes as scope, then "anything else 403 forbidden": a User token or
// platform key that sends none is such a case.
const scopeRequired = () => forbidden('Send scope: `platform` (webhooks.manage) or an Application id (webhooks.manage or its owner).');

/**
 * Part B scope rules: an app-scoped key may omit scope or pass its own Application; an Application
 * owner's User token must pass the Application id; webhooks.manage passes `platform` or any
 * application_id; anything else 403 forbidden.
 */
export async function resolveCreateScope(ctx: Ctx, scope: string | undefined): Promise<CreateScope> {
  const viewer = webhookViewer(ctx);
  const createdByUserId = await creatorOf(ctx);
  if (viewer.keyApp) {
    if (scope !== undefined && scope !== viewer.keyApp) throw forbidden("An app-scoped key manages only its own Application's subscriptions.");
    return { scope: viewer.keyApp, applicationId: viewer.keyApp, createdByUserId };
  }
  if (viewer.manage) {
    if (scope === undefined) throw scopeRequired();
    if (scope === 'platform') return { scope, applicationId: null, createdByUserId };
    if (!(await findApplication(ctx.db, scope))) throw new ApiError('application_not_found');
    return { scope, applicationId: scope, createdByUserId };
  }
  if (viewer.userId) {
    if (scope === undefined) throw scopeRequired();
    if (scope !== 'platform' && (await isApplicationOwner(ctx.db, viewer.userId, scope))) return { scope, applicationId: scope, createdByUserId };
  }
  throw notPermitted();
}

/**
 * A create's scope read again under its Application's lock (lockApplicationTenants, which an
 * ownership move's FOR UPDATE waits for or holds), in a statement of its own: an owner who lost the
 * Application to a move committed while the create waited gets 403 forbidden, as a stranger does,
 * and nothing is created. webhooks.manage and the Application's own key keep their right.
 */
export async function assertCreateScopeHeld(ctx: Ctx, tx: Tx, scope: CreateScope): Promise<void> {
  const viewer = webhookViewer(ctx);
  if (!scope.applicationId || viewer.manage || viewer.keyApp || !viewer.userId) return;
  if (!(await isApplicationOwner(tx, viewer.userId, scope.applicationId))) throw notPermitted();
}

async function creatorOf(ctx: Ctx): Promise<string | null> {
  if (ctx.actor.type === 'user') return ctx.actor.userId;
  if (ctx.actor.type !== 'api_key') return null;
  return findKeyCreator(ctx.db, ctx.actor.keyId);
}

/** The Tenant of an app-scope subscription (audit rows carry it); null for platform scope. */
export async function tenantOfApplication(db: Queryable, applicationId: string | null): Promise<string | null> {
  if (!applicationId) return null;
  return findApplicationTenantId(db, applicationId);
}

