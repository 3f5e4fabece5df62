import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { ListOf } from '../../http/schemas.js';
import { CreateWebhookBody, Delivery, DeliveryListQuery, DeliveryParams, EmptyBody, PatchWebhookBody, RotatedSecret, Webhook, WebhookIdParam, WebhookWithSecret, WebhookListQuery } from './schemas.js';
import { createWebhook, deleteWebhook, getWebhook, listWebhooks, rotateSecret } from './service.js';
import { patchWebhook } from './patch.js';
import { listDeliveries, redeliver, sendTest } from './deliveries.js';

const tags = ['Webhooks'];

// Create and rotate return a signing secret and still take an optional Idempotency-Key: the stored
// answer is sealed (src/http/idempotency.ts). An API key's secret is only hashed, so its create and
// rotate take none (docs/decisions.md, Audit and webhooks: Secrets).
export function webhookRoutes(app: App, deps: Deps): void {
  app.get('/v1/webhooks', {
    schema: { summary: 'Subscriptions the caller may see', tags, querystring: WebhookListQuery, response: { 200: ListOf(Webhook) } },
    config: { meta: { auth: 'any' } },
    handler: (request) => listWebhooks(ctxOf(deps, request), request.query),
  });
  app.post('/v1/webhooks', {
    schema: { summary: 'Create a subscription; the signing secret is shown once', tags, body: CreateWebhookBody, response: { 201: WebhookWithSecret } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['forbidden', 'application_not_found', 'invalid_webhook_url', 'plan_limit_reached', 'subscription_required'] } },
    handler: async (request, reply) => {
      const created = await createWebhook(ctxOf(deps, request), request.body);
      reply.code(201);
      return created;
    },
  });
  app.get('/v1/webhooks/:id', {
    schema: { summary: 'Fetch a subscription (no secret)', tags, params: WebhookIdParam, response: { 200: Webhook } },
    config: { meta: { auth: 'any', errors: ['webhook_not_found'] } },
    handler: (request) => getWebhook(ctxOf(deps, request), request.params.id),
  });
  app.patch('/v1/webhooks/:id', {
    schema: { summary: 'Change url, events, description, api_version (forward) or status (disabled → healthy)', tags, params: WebhookIdParam, body: PatchWebhookBody, response: { 200: Webhook } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['webhook_not_found', 'read_only_field', 'invalid_webhook_url', 'invalid_status_transition'] } },
    handler: (request) => patchWebhook(ctxOf(deps, request), request.params.id, request.body as PatchWebhookBody),
  });
  app.delete('/v1/webhooks/:id', {
    schema: { summary: 'Delete a subscription; queued retries are dropped', tags, params: WebhookIdParam, response: { 204: Type.Null() } },
    config: { meta: { auth: 'any', destructive: 'always', errors: ['webhook_not_found'] } },
    handler: async (request, reply) => {
      await deleteWebhook(ctxOf(deps, request), request.params.id);
      reply.code(204);
      return null;
    },
  });
  app.post('/v1/webhooks/:id/rotate-secret', {
    schema: { summary: 'New signing secret; the previous one also signs for 24 hours', tags, params: WebhookIdParam, body: EmptyBody, response: { 200: RotatedSecret } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['webhook_not_found'] } },
    handler: (request) => rotateSecret(ctxOf(deps, request), request.params.id),
  });
  app.post('/v1/webhooks/:id/test', {
    schema: { summary: 'Send webhook.test through the real delivery path', tags, params: WebhookIdParam, body: EmptyBody, response: { 202: Delivery } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['webhook_not_found', 'rate_limited'] } },
    handler: async (request, reply) => {
      const delivery = await sendTest(ctxOf(deps, request), request.params.id);
      reply.code(202);
      return delivery;
    },
  });
  app.get('/v1/webhooks/:id/deliveries', {
    schema: { summary: 'The 30-day delivery log', tags, params: WebhookIdParam, querystring: DeliveryListQuery, response: { 200: ListOf(Delivery) } },
    config: { meta: { auth: 'any', errors: ['webhook_not_found'] } },
    handler: (request) => listDeliveries(ctxOf(deps, request), request.params.id, request.query),
  });
  app.post('/v1/webhooks/:id/deliveries/:deliveryId/redeliver', {
    schema: { summary: 'Send the same event again now, outside the retry schedule', tags, params: DeliveryParams, body: EmptyBody, response: { 202: Delivery } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: ['webhook_not_found', 'delivery_not_found', 'rate_limited'] } },
    handler: async (request, reply) => {
      const delivery = await redeliver(ctxOf(deps, request), request.params.id, request.params.deliveryId);
      reply.code(202);
      return delivery;
    },
  });
}
