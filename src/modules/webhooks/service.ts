import type { Ctx } from '../../context.js';
import { inTx } from '../../context.js';
import { addSeconds } from '../../clock.js';
import type { Tx } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { newId } from '../../ids.js';
import { recordAudit } from '../../audit/record.js';
import { keyset, toPage } from '../../http/pagination.js';
import { assertWithinPlan, findTenant } from '../tenancy/plans.js';
import { lockApplicationTenants } from '../../access/locks.js';
import { assertTenantWritable } from '../tenancy/writable.js';
import { CURRENT_API_VERSION, newSigningSecret, ROTATION_OVERLAP_SECONDS } from './catalog.js';
import { assertWebhookUrl } from './targets.js';
import { sealSigningSecret } from './dispatch.js';
import { assertCreateScopeHeld, lockVisibleSubscription, resolveCreateScope, tenantOfApplication, visibleSubscription, webhookViewer } from './access.js';
import {
  countTenantSubscriptions,
  deleteSubscription,
  insertSubscription,
  listSubscriptions,
  subscriptionListFilter,
  toWebhook,
  updateSigningSecret,
  type SubscriptionRow,
} from './store.js';
import type { CreateWebhookBody, Webhook, WebhookListQuery, WebhookWithSecret } from './schemas.js';

/** Audit rows of subscription changes: target webhook, with its Application and Tenant. */
export async function auditWebhook(tx: Tx, ctx: Ctx, action: string, sub: SubscriptionRow, change: { before?: unknown; after?: unknown }): Promise<void> {
  await recordAudit(tx, inTx(ctx, tx), {
    action,
    target: { type: 'webhook', id: sub.id },
    applicationId: sub.application_id,
    tenantId: await tenantOfApplication(tx, sub.application_id),
    ...change,
  });
}

/** POST /v1/webhooks: 201 with the signing secret (shown once). */
export async function createWebhook(ctx: Ctx, body: CreateWebhookBody): Promise<WebhookWithSecret> {
  // DNS happens before the transaction: nothing waits on the outside while holding a connection. The
  // reads before it use the mode's connection, not an idempotent request's transaction (src/db/lazy-tx.ts),
  // which would begin at the first read and stay open over the lookup (on the embedded database, every
  // other request waited for it).
  const scope = await resolveCreateScope({ ...ctx, db: ctx.deps.database.scoped(ctx.mode) }, body.scope);
  await assertWebhookUrl(ctx.deps, body.url);
  return ctx.db.transaction(async (tx) => {
    if (scope.applicationId) {
      // The Tenant row lock serializes concurrent creations, so the cap holds under races. The Tenant
      // is read under the Application's KEY SHARE lock (lockApplicationTenants), as a grant reads it:
      // an ownership move meanwhile waits for this creation and counts the subscription, or this
      // creation waits for the move and counts against the Tenant the Application moved to.
      const [tenantId] = await lockApplicationTenants(tx, [scope.applicationId]);
      // The caller's right is read again under that lock: an owner who lost the Application meanwhile is refused.
      await assertCreateScopeHeld(ctx, tx, scope);
      // An app-scope subscription is its Application's Tenant's data: none is added while it is migrating.
      await assertTenantWritable(tx, tenantId);
      const tenant = await findTenant(tx, tenantId);
      if (tenant) assertWithinPlan(tenant, 'webhooks', (await countTenantSubscriptions(tx, tenantId)) + 1);
    }
    const id = newId('whk');
    const secret = newSigningSecret();
    const row: SubscriptionRow = {
      id,
      scope: scope.scope,
      application_id: scope.applicationId,
      url: body.url,
      events: [...new Set(body.events)],
      description: body.description ?? null,
      status: 'healthy',
      signing_secret: sealSigningSecret(ctx.deps, id, secret),
      previous_secret: null,
      previous_secret_expires_at: null,
      api_version: CURRENT_API_VERSION,
      test_mode: ctx.mode === 'test',
      consecutive_failures: 0,
      unhealthy_since: null,
      disabled_at: null,
      disabled_reason: null,
      last_delivery_at: null,
      created_by_user_id: scope.createdByUserId,
      created_at: ctx.now,
      updated_at: ctx.now,
    };
    await insertSubscription(tx, row);
    await auditWebhook(tx, ctx, 'webhook.created', row, { after: toWebhook(row) });
    return { ...toWebhook(row), signing_secret: secret };
  });
}

/** GET /v1/webhooks: the subscriptions the caller may see, newest first. */
export async function listWebhooks(ctx: Ctx, q: WebhookListQuery) {
  const filter = subscriptionListFilter(webhookViewer(ctx), q);
  const ks = keyset(q, filter.params.length + 1, 'w');
  const rows = await listSubscriptions(ctx.db, filter, ks);
  return toPage(rows, ks.limit, (r) => toWebhook(r));
}

export async function getWebhook(ctx: Ctx, id: string): Promise<Webhook> {
  return toWebhook(await visibleSubscription(ctx, id));
}

/** DELETE /v1/webhooks/{id}: its queued deliveries go with it (cascade), so nothing more is sent. */
export async function deleteWebhook(ctx: Ctx, id: string): Promise<void> {
  await ctx.db.transaction(async (tx) => {
    const sub = await lockVisibleSubscription(ctx, tx, id);
    await deleteSubscription(tx, id);
    await auditWebhook(tx, ctx, 'webhook.deleted', sub, { before: toWebhook(sub) });
  });
}

/** POST /v1/webhooks/{id}/rotate-secret: the old secret keeps signing (a second v1) for 24 hours. */
export async function rotateSecret(ctx: Ctx, id: string): Promise<{ id: string; signing_secret: string; previous_secret_expires_at: string }> {
  return ctx.db.transaction(async (tx) => {
    const sub = await lockVisibleSubscription(ctx, tx, id);
    const secret = newSigningSecret();
    const expires = addSeconds(ctx.now, ROTATION_OVERLAP_SECONDS);
    // The current secret moves to previous as it is stored (sealed for this subscription).
    await updateSigningSecret(tx, id, sealSigningSecret(ctx.deps, id, secret), sub.signing_secret, expires, ctx.now);
    await auditWebhook(tx, ctx, 'webhook.secret_rotated', sub, { after: { previous_secret_expires_at: expires.toISOString() } });
    return { id, signing_secret: secret, previous_secret_expires_at: expires.toISOString() };
  });
}
