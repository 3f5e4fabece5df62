import type { Ctx } from '../../context.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { ApiError, invalidField } from '../../errors.js';
import { API_VERSIONS } from './catalog.js';
import { assertWebhookUrl } from './targets.js';
import { lockVisibleSubscription, visibleSubscription } from './access.js';
import { toWebhook, updateSubscription, type SubscriptionRow } from './store.js';
import { WEBHOOK_READ_ONLY, type PatchWebhookBody, type Webhook } from './schemas.js';
import { auditWebhook } from './service.js';

const versionIndex = (v: string) => (API_VERSIONS as readonly string[]).indexOf(v);

/**
 * api_version moves forward only: checked against the row before the DNS lookup, and again against
 * the locked row (a PATCH that moved it forward meanwhile is not undone).
 */
function assertForward(body: PatchWebhookBody, row: SubscriptionRow): void {
  if (body.api_version !== undefined && versionIndex(body.api_version) < versionIndex(row.api_version)) {
    throw invalidField('api_version', `cannot move back from ${row.api_version}; published versions: ${API_VERSIONS.join(', ')}`);
  }
}

/**
 * PATCH /v1/webhooks/{id}: url, events, description, api_version (forward only, to a published
 * version) and status (only disabled → healthy, which resets the health counters; missed events
 * are not backfilled). scope and test_mode are fixed: 422 read_only_field.
 */
export async function patchWebhook(ctx: Ctx, id: string, body: PatchWebhookBody): Promise<Webhook> {
  assertNoReadOnlyFields(body, WEBHOOK_READ_ONLY);
  // Read outside an idempotent request's transaction, so it does not stay open over the DNS lookup (createWebhook).
  const current = await visibleSubscription(ctx, id, ctx.deps.database.scoped(ctx.mode));
  assertForward(body, current);
  if (body.url !== undefined && body.url !== current.url) await assertWebhookUrl(ctx.deps, body.url);

  return ctx.db.transaction(async (tx) => {
    const sub = await lockVisibleSubscription(ctx, tx, id);
    assertForward(body, sub);
    let reset = false;
    if (body.status === 'healthy' && sub.status !== 'healthy') {
      if (sub.status !== 'disabled') {
        throw new ApiError('invalid_status_transition', { message: 'Only a disabled subscription can be set back to healthy.', details: { from: sub.status, to: 'healthy' } });
      }
      reset = true;
    }
    const next = {
      url: body.url ?? sub.url,
      events: body.events ? [...new Set(body.events)] : sub.events,
      description: body.description !== undefined ? body.description : sub.description,
      api_version: body.api_version ?? sub.api_version,
    };
    // A PATCH that changes nothing writes nothing (no updated_at, no audit row).
    const unchanged = !reset && next.url === sub.url && next.description === sub.description && next.api_version === sub.api_version
      && JSON.stringify(next.events) === JSON.stringify(sub.events);
    if (unchanged) return toWebhook(sub);
    // The row is held FOR UPDATE: the UPDATE finds it and returns it as it is now.
    const after = await updateSubscription(tx, id, next, ctx.now, reset);
    await auditWebhook(tx, ctx, 'webhook.updated', sub, { before: toWebhook(sub), after: toWebhook(after) });
    return toWebhook(after);
  });
}
