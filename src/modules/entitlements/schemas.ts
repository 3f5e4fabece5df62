import { Type, type Static } from '@sinclair/typebox';
import { IncludeInactiveQuery, Nullable, NullableTimestamp, OpenEnum, PageQuery, readOnlyProperties, Timestamp } from '../../http/schemas.js';

export const ENTITLEMENT_STATUSES = ['active', 'disabled', 'revoked', 'expired'] as const;
export const SOURCES = ['purchase', 'trial', 'admin_grant', 'org_seat'] as const;
export const MEMBER_SCOPES = ['all_members', 'allowlist', 'denylist'] as const;

export const Entitlement = Type.Object(
  {
    id: Type.String(),
    user_id: Nullable(Type.String()),
    organization_id: Nullable(Type.String()),
    application_id: Type.String(),
    status: OpenEnum(ENTITLEMENT_STATUSES),
    source: OpenEnum(SOURCES),
    order_id: Nullable(Type.String()),
    starts_at: Timestamp,
    ends_at: NullableTimestamp,
    disabled_reason: Nullable(Type.String()),
    member_scope: Nullable(OpenEnum(MEMBER_SCOPES)),
    member_overrides: Nullable(Type.Array(Type.String())),
    test_mode: Type.Boolean(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'Entitlement', title: 'Entitlement' },
);
export type Entitlement = Static<typeof Entitlement>;

export const EntitlementListItem = Type.Intersect(
  [
    Entitlement,
    Type.Object({
      granted_via: Type.Optional(Nullable(Type.Object({ organization_id: Type.String(), member_decision: OpenEnum(['included', 'excluded', 'seat_limit'] as const) }))),
      included_member_count: Type.Optional(Type.Integer()),
    }),
  ],
  { $id: 'EntitlementListItem', title: 'EntitlementListItem' },
);

export const GrantBody = Type.Object(
  {
    application_id: Type.String({ minLength: 1, maxLength: 100 }),
    source: Type.Union(SOURCES.map((s) => Type.Literal(s))),
    order_id: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 255 }))),
    starts_at: Type.Optional(Type.String({ format: 'date-time', description: 'Default now; at most 1 year ahead (the same instant a calendar year later), else 422 validation_failed.' })),
    ends_at: Type.Optional(Nullable(Type.String({ format: 'date-time' }))),
  },
  { additionalProperties: false },
);
export type GrantBody = Static<typeof GrantBody>;

/** Read-only fields are accepted by the schema so the service answers 422 read_only_field. */
/** Entitlement fields a PATCH cannot write (422 read_only_field). */
export const ENTITLEMENT_READ_ONLY = ['starts_at', 'user_id', 'organization_id', 'application_id', 'id', 'test_mode', 'created_at', 'updated_at'] as const;

export const PatchEntitlementBody = Type.Object(
  {
    status: Type.Optional(Type.Union(ENTITLEMENT_STATUSES.map((s) => Type.Literal(s)))),
    // No minLength: an empty (or blank) reason where one is needed is 422 disabled_reason_required, not validation_failed.
    disabled_reason: Type.Optional(Nullable(Type.String({ maxLength: 255, description: '1–255 characters; required to disable or revoke (missing, empty or blank: 422 disabled_reason_required).' }))),
    ends_at: Type.Optional(Nullable(Type.String({ format: 'date-time' }))),
    source: Type.Optional(Type.Union(SOURCES.map((s) => Type.Literal(s)))),
    order_id: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 255 }))),
    member_scope: Type.Optional(Nullable(Type.Union(MEMBER_SCOPES.map((s) => Type.Literal(s))))),
    member_overrides: Type.Optional(Nullable(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 10000, uniqueItems: true }))),
    ...readOnlyProperties(ENTITLEMENT_READ_ONLY),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type PatchEntitlementBody = Static<typeof PatchEntitlementBody>;

const listFilters = {
  application_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
  status: Type.Optional(Type.Union(ENTITLEMENT_STATUSES.map((s) => Type.Literal(s)))),
  source: Type.Optional(Type.Union(SOURCES.map((s) => Type.Literal(s)))),
  ...IncludeInactiveQuery,
  ...PageQuery,
};
export const UserEntitlementQuery = Type.Object(listFilters, { additionalProperties: false });
export type UserEntitlementQuery = Static<typeof UserEntitlementQuery>;
export const EntitlementQuery = Type.Object(
  {
    ...listFilters,
    user_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    organization_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    order_id: Type.Optional(Type.String({ minLength: 1, maxLength: 255 })),
    ends_before: Type.Optional(Type.String({ format: 'date-time' })),
  },
  { additionalProperties: false },
);
export type EntitlementQuery = Static<typeof EntitlementQuery>;
export const EntitlementIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
