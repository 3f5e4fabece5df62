import { Type, type Static } from '@sinclair/typebox';
import { IncludeInactiveQuery, Name, Nullable, NullableTimestamp, OpenEnum, PageQuery, readOnlyProperties, Timestamp } from '../../http/schemas.js';
import { AuditEvent } from '../audit/schemas.js';

export const USER_STATUSES = ['active', 'invited', 'suspended', 'deleted'] as const;
export type UserStatus = (typeof USER_STATUSES)[number];

export const User = Type.Object(
  {
    id: Type.String(),
    email: Type.String(),
    email_verified: Type.Boolean(),
    pending_email: Nullable(Type.String()),
    status: OpenEnum(USER_STATUSES),
    mfa_enabled: Type.Boolean(),
    signup_application_id: Nullable(Type.String()),
    test_mode: Type.Boolean(),
    created_at: Timestamp,
    updated_at: Timestamp,
    last_login_at: NullableTimestamp,
  },
  { $id: 'User', title: 'User' },
);
export type User = Static<typeof User>;

export const UserListQuery = Type.Object(
  {
    status: Type.Optional(Type.Union(USER_STATUSES.map((s) => Type.Literal(s)))),
    email: Type.Optional(Type.String({ minLength: 1, maxLength: 320 })),
    q: Type.Optional(Type.String({ minLength: 3, maxLength: 320 })),
    application_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    organization_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    created_after: Type.Optional(Type.String({ format: 'date-time' })),
    created_before: Type.Optional(Type.String({ format: 'date-time' })),
    ...IncludeInactiveQuery,
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type UserListQuery = Static<typeof UserListQuery>;

export const CreateUserBody = Type.Object(
  {
    email: Type.String({ format: 'email', maxLength: 320 }),
    display_name: Type.Optional(Name(100)),
    status: Type.Optional(Type.Union([Type.Literal('invited'), Type.Literal('active')], { default: 'invited' })),
    send_invitation: Type.Optional(Type.Boolean({ default: true })),
  },
  { additionalProperties: false },
);
export type CreateUserBody = Static<typeof CreateUserBody>;

/** User fields PATCH cannot write; the schema accepts them so the service answers 422 read_only_field. */
export const USER_READ_ONLY = ['id', 'email_verified', 'pending_email', 'mfa_enabled', 'signup_application_id', 'test_mode', 'created_at', 'updated_at', 'last_login_at'] as const;

export const PatchUserBody = Type.Object(
  {
    email: Type.Optional(Type.String({ format: 'email', maxLength: 320 })),
    status: Type.Optional(Type.Union(USER_STATUSES.map((s) => Type.Literal(s)))),
    ...readOnlyProperties(USER_READ_ONLY),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type PatchUserBody = { email?: string; status?: UserStatus } & Record<string, unknown>;

export const ReasonBody = Type.Object({ reason: Type.Optional(Type.String({ maxLength: 1000 })) }, { additionalProperties: false });
export type ReasonBody = Static<typeof ReasonBody>;

export const ErasureRequest = Type.Object(
  {
    user_id: Type.String(),
    status: OpenEnum(['scheduled', 'cancelled', 'completed'] as const),
    requested_at: Timestamp,
    scheduled_for: Timestamp,
  },
  { $id: 'ErasureRequest', title: 'ErasureRequest' },
);
export type ErasureRequest = Static<typeof ErasureRequest>;

export const ExportBundle = Type.Object(
  {
    exported_at: Timestamp,
    user: User,
    profile: Type.Object({}, { additionalProperties: true }),
    settings: Type.Object({}, { additionalProperties: true }),
    identities: Type.Array(Type.Object({ method: OpenEnum(['password', 'sso'] as const), mfa_enabled: Type.Boolean(), last_used_at: NullableTimestamp })),
    sessions: Type.Array(Type.Object({ id: Type.String(), created_at: Timestamp, ip_address: Nullable(Type.String()), user_agent: Nullable(Type.String()) })),
    organizations: Type.Array(
      Type.Object({ organization_id: Type.String(), role: OpenEnum(['org_admin', 'member'] as const), membership_status: OpenEnum(['active', 'pending'] as const), joined_at: NullableTimestamp }),
    ),
    roles: Type.Array(Type.Object({ role_id: Type.String(), application_id: Nullable(Type.String()), assigned_at: Timestamp })),
    applications: Type.Array(Type.Object({}, { additionalProperties: true })),
    audit_events: Type.Array(AuditEvent, { description: "The user's own trail in hot storage (365 days), as GET /v1/audit-events returns it." }),
  },
  { $id: 'ExportBundle', title: 'ExportBundle' },
);
