import { Type, type Static } from '@sinclair/typebox';
import { Nullable, NullableTimestamp, OpenEnum, PageQuery, StringEnum, Timestamp, readOnlyProperties } from '../../http/schemas.js';
import { API_VERSIONS, EVENT_TYPES } from './catalog.js';

export const Webhook = Type.Object(
  {
    id: Type.String(),
    scope: Type.String({ description: '`platform` or an application_id.' }),
    url: Type.String(),
    events: Type.Array(Type.String()),
    description: Nullable(Type.String()),
    status: OpenEnum(['healthy', 'unhealthy', 'disabled'] as const),
    api_version: Type.String(),
    test_mode: Type.Boolean(),
    consecutive_failures: Type.Integer({ description: 'Consecutive deliveries that exhausted every retry.' }),
    last_delivery_at: NullableTimestamp,
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'WebhookSubscription', title: 'WebhookSubscription' },
);
export type Webhook = Static<typeof Webhook>;

/** The create response: the subscription and its signing secret, shown only here (and by rotate-secret). */
export const WebhookWithSecret = Type.Intersect([Webhook, Type.Object({ signing_secret: Type.String({ description: 'Shown only in this response.' }) })], {
  $id: 'WebhookSubscriptionWithSecret',
  title: 'WebhookSubscriptionWithSecret',
});
export type WebhookWithSecret = Static<typeof WebhookWithSecret>;

export const Delivery = Type.Object(
  {
    id: Type.String(),
    event_id: Type.String(),
    event_type: Type.String(),
    attempt: Type.Integer({ description: 'Attempts made so far.' }),
    status: OpenEnum(['pending', 'succeeded', 'failed'] as const),
    response_status: Nullable(Type.Integer()),
    duration_ms: Nullable(Type.Integer()),
    error: Nullable(Type.String({ description: 'The first 1 KB of the error body, or what went wrong.' })),
    next_retry_at: NullableTimestamp,
    created_at: Timestamp,
  },
  { $id: 'WebhookDelivery', title: 'WebhookDelivery' },
);
export type Delivery = Static<typeof Delivery>;

export const RotatedSecret = Type.Object({ id: Type.String(), signing_secret: Type.String(), previous_secret_expires_at: Timestamp });

const EventName = StringEnum(['*', ...EVENT_TYPES]);
const Events = Type.Array(EventName, { minItems: 1, maxItems: EVENT_TYPES.length + 1, uniqueItems: true });
const Url = Type.String({ minLength: 1, maxLength: 2048 });
const Description = Nullable(Type.String({ maxLength: 500 }));

export const CreateWebhookBody = Type.Object(
  {
    scope: Type.Optional(Type.String({ minLength: 1, maxLength: 100, description: '`platform` or an application_id; an app-scoped key may omit it.' })),
    url: Url,
    events: Events,
    description: Type.Optional(Description),
  },
  { additionalProperties: false },
);
export type CreateWebhookBody = Static<typeof CreateWebhookBody>;

/** Fields that exist but cannot be written; the schema accepts them so the service answers 422 read_only_field. */
export const WEBHOOK_READ_ONLY = ['id', 'scope', 'test_mode', 'signing_secret', 'consecutive_failures', 'last_delivery_at', 'created_at', 'updated_at'] as const;

export const PatchWebhookBody = Type.Object(
  {
    url: Type.Optional(Url),
    events: Type.Optional(Events),
    description: Type.Optional(Description),
    api_version: Type.Optional(Type.Union(API_VERSIONS.map((v) => Type.Literal(v)), { description: 'A published version, never older than the current one.' })),
    status: Type.Optional(Type.Literal('healthy', { description: 'Only disabled → healthy.' })),
    ...readOnlyProperties(WEBHOOK_READ_ONLY),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type PatchWebhookBody = { url?: string; events?: string[]; description?: string | null; api_version?: string; status?: 'healthy' } & Record<string, unknown>;

export const WebhookListQuery = Type.Object(
  {
    scope: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    status: Type.Optional(Type.Union([Type.Literal('healthy'), Type.Literal('unhealthy'), Type.Literal('disabled')])),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type WebhookListQuery = Static<typeof WebhookListQuery>;

export const DeliveryListQuery = Type.Object(
  {
    event_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    status: Type.Optional(Type.Union([Type.Literal('pending'), Type.Literal('succeeded'), Type.Literal('failed')])),
    since: Type.Optional(Type.String({ format: 'date-time' })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type DeliveryListQuery = Static<typeof DeliveryListQuery>;

export const WebhookIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
export const DeliveryParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), deliveryId: Type.String({ minLength: 1, maxLength: 64 }) });
export { EmptyBody } from '../../http/schemas.js';
