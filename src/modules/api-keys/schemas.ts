import { Type, type Static } from '@sinclair/typebox';
import { IncludeInactiveQuery, Name, Nullable, NullableTimestamp, OpenEnum, PageQuery, readOnlyProperties, Timestamp } from '../../http/schemas.js';

export const ApiKey = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    scope: Type.String(),
    permissions: Type.Array(Type.String()),
    mode: OpenEnum(['live', 'test'] as const),
    intended_use: OpenEnum(['service', 'agent'] as const),
    restrict_destructive: Type.Boolean(),
    secret_hint: Type.String(),
    expires_at: NullableTimestamp,
    created_by: Type.Object({ type: Type.Literal('user'), id: Type.String() }),
    last_used_at: NullableTimestamp,
    created_at: Timestamp,
    revoked_at: NullableTimestamp,
  },
  { $id: 'ApiKey', title: 'ApiKey' },
);
export type ApiKey = Static<typeof ApiKey>;

export const ApiKeyWithSecret = Type.Intersect([ApiKey, Type.Object({ secret: Type.String({ description: 'Shown only in this response.' }) })], {
  $id: 'ApiKeyWithSecret',
  title: 'ApiKeyWithSecret',
});

const Permissions = Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 200, uniqueItems: true });

export const CreateKeyBody = Type.Object(
  {
    name: Name(100),
    scope: Type.String({ minLength: 1, maxLength: 100 }),
    permissions: Permissions,
    mode: Type.Optional(Type.Union([Type.Literal('live'), Type.Literal('test')], { default: 'live' })),
    intended_use: Type.Optional(Type.Union([Type.Literal('service'), Type.Literal('agent')], { default: 'service' })),
    restrict_destructive: Type.Optional(Type.Boolean()),
    expires_at: Type.Optional(Nullable(Type.String({ format: 'date-time' }))),
  },
  { additionalProperties: false },
);
export type CreateKeyBody = Static<typeof CreateKeyBody>;

/** API key fields a PATCH cannot write (Part A: PATCH changes name, permissions or restrict_destructive; mode never changes). */
export const KEY_READ_ONLY = ['id', 'scope', 'mode', 'intended_use', 'expires_at', 'secret', 'secret_hint', 'created_by', 'last_used_at', 'created_at', 'updated_at', 'revoked_at'] as const;

export const PatchKeyBody = Type.Object(
  {
    name: Type.Optional(Name(100)),
    permissions: Type.Optional(Permissions),
    restrict_destructive: Type.Optional(Type.Boolean()),
    ...readOnlyProperties(KEY_READ_ONLY),
  },
  { additionalProperties: false },
);
export type PatchKeyBody = Static<typeof PatchKeyBody>;

export const KeyListQuery = Type.Object(
  {
    scope: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    mode: Type.Optional(Type.Union([Type.Literal('live'), Type.Literal('test')])),
    intended_use: Type.Optional(Type.Union([Type.Literal('service'), Type.Literal('agent')])),
    ...IncludeInactiveQuery,
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type KeyListQuery = Static<typeof KeyListQuery>;

export const KeyIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
