import type { Ctx } from '../../context.js';
import { assertNoReadOnlyFields } from '../../http/patch.js';
import { ApiError, invalidField } from '../../errors.js';
import { API_VERSIONS } from './catalog.js';
import { assertWebhookUrl } from './targets.js';
import { visibleSubscription } from './access.js';
import { findSubscription, toWebhook, updateSubscription } from './store.js';
import { WEBHOOK_READ_ONLY, type PatchWebhookBody, type Webhook } from './schemas.js';
import { auditWebhook } from './service.js';
import { assertAppTenantWritable } from '../tenancy/writable.js';

const versionIndex = (v: string) => (API_VERSIONS as readonly string[]).indexOf(v);

/**
 * PATCH /v1/webhooks/{id}: url, events, description, api_version (forward only, to a published
 * version) and status (only disabled → healthy, which resets the health counters; missed events
 * are not backfilled). scope and test_mode are fixed: 422 read_only_field.
 */
export async function patchWebhook(ctx: Ctx, id: string, body: PatchWebhookBody): Promise<Webhook> {
  assertNoReadOnlyFields(body, WEBHOOK_READ_ONLY);
  // Read outside an idempotent request's transaction, so it does not stay open over the DNS lookup (createWebhook).
  const current = await visibleSubscription(ctx, id, ctx.deps.database.scoped(ctx.mode));
  if (body.api_version !== undefined && versionIndex(body.api_version) < versionIndex(current.api_version)) {
    throw invalidField('api_version', `cannot move back from ${current.api_version}; published versions: ${API_VERSIONS.join(', ')}`);
  }
  if (body.url !== undefined && body.url !== current.url) await assertWebhookUrl(ctx.deps, body.url);

  return ctx.db.transaction(async (tx) => {
    const sub = await findSubscription(tx, id, true);
    if (!sub) throw new ApiError('webhook_not_found');
    if (sub.application_id) await assertAppTenantWritable(tx, sub.application_id);
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
    const updated = await updateSubscription(tx, id, next, ctx.now, reset);
    if (!updated) throw new ApiError('webhook_not_found');
    const after = (await findSubscription(tx, id))!;
    await auditWebhook(tx, ctx, 'webhook.updated', sub, { before: toWebhook(sub), after: toWebhook(after) });
    return toWebhook(after);
  });
}
