import { Type, type Static } from '@sinclair/typebox';
import { Nullable, OpenEnum, PageQuery, Timestamp } from '../../http/schemas.js';

export const AuditEvent = Type.Object(
  {
    id: Type.String(),
    action: Type.String(),
    actor: Type.Object({
      type: OpenEnum(['user', 'api_key', 'system'] as const),
      id: Nullable(Type.String()),
      via_api_key_id: Nullable(Type.String()),
    }),
    target: Nullable(Type.Object({ type: Type.String(), id: Nullable(Type.String()) })),
    target_user_id: Nullable(Type.String()),
    application_id: Nullable(Type.String()),
    organization_id: Nullable(Type.String()),
    tenant_id: Nullable(Type.String()),
    before: Type.Unknown({ description: 'State before the change (null when none).' }),
    after: Type.Unknown({ description: 'State after the change (null when none).' }),
    request_id: Nullable(Type.String()),
    timestamp: Timestamp,
  },
  { $id: 'AuditEvent', title: 'AuditEvent' },
);
export type AuditEvent = Static<typeof AuditEvent>;

const Id = Type.String({ minLength: 1, maxLength: 100 });

export const AuditQuery = Type.Object(
  {
    target_user_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64, description: 'A usr_ id or `me`.' })),
    target_type: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    target_id: Type.Optional(Id),
    actor_id: Type.Optional(Id),
    actor_type: Type.Optional(Type.Union([Type.Literal('user'), Type.Literal('api_key'), Type.Literal('system')])),
    action: Type.Optional(Type.Array(Type.String({ minLength: 1, maxLength: 100 }), { minItems: 1, maxItems: 50, description: 'Repeatable.' })),
    application_id: Type.Optional(Id),
    organization_id: Type.Optional(Id),
    tenant_id: Type.Optional(Id),
    since: Type.Optional(Type.String({ format: 'date-time', description: 'Inclusive.' })),
    until: Type.Optional(Type.String({ format: 'date-time', description: 'Exclusive.' })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type AuditQuery = Static<typeof AuditQuery>;

export const AuditIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
