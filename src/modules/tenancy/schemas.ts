import { Type, type Static, type TLiteral, type TUnion } from '@sinclair/typebox';
import { IncludeInactiveQuery, Nullable, NullableTimestamp, OpenEnum, PageQuery, Timestamp, readOnlyProperties } from '../../http/schemas.js';

export const TIERS = ['shared', 'isolated', 'dedicated_region'] as const;
export type Tier = (typeof TIERS)[number];
export const PLAN_NAMES = ['starter', 'team', 'enterprise'] as const;
export const TENANT_STATUSES = ['active', 'migrating'] as const;
export const SUBSCRIPTION_STATUSES = ['none', 'active', 'trialing', 'past_due', 'canceled', 'unpaid', 'incomplete', 'incomplete_expired', 'paused'] as const;
export const REQUEST_STATUSES = ['pending', 'scheduled', 'in_progress', 'completed', 'cancelled'] as const;
/** Regions a dedicated_region Tenant may live in (Part B). */
export const REGIONS = ['us-east-1', 'us-west-2', 'ca-central-1', 'eu-west-1', 'eu-central-1', 'ap-southeast-2'] as const;
/** Where shared and isolated Tenants live. */
export const DEFAULT_REGION = 'us-east-1';

const literals = <const T extends readonly string[]>(values: T): TUnion<TLiteral<T[number]>[]> => Type.Union(values.map((v) => Type.Literal(v)));

export const Tenant = Type.Object(
  {
    id: Type.String(),
    owner_type: OpenEnum(['user', 'organization'] as const),
    owner_user_id: Nullable(Type.String()),
    owner_organization_id: Nullable(Type.String()),
    tier: OpenEnum(TIERS),
    plan: OpenEnum(PLAN_NAMES),
    region: Type.String(),
    status: OpenEnum(TENANT_STATUSES),
    subscription_status: OpenEnum(SUBSCRIPTION_STATUSES),
    restricted: Type.Boolean(),
    application_count: Type.Integer(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'Tenant', title: 'Tenant' },
);
export type Tenant = Static<typeof Tenant>;

export const TenantListQuery = Type.Object(
  {
    plan: Type.Optional(literals(PLAN_NAMES)),
    tier: Type.Optional(literals(TIERS)),
    status: Type.Optional(literals(TENANT_STATUSES)),
    restricted: Type.Optional(Type.Boolean()),
    owner_user_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    owner_organization_id: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type TenantListQuery = Static<typeof TenantListQuery>;

export const TenantIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
export const RequestIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), requestId: Type.String({ minLength: 1, maxLength: 64 }) });

export const TierChangeRequest = Type.Object(
  {
    id: Type.String(),
    tenant_id: Type.String(),
    from_tier: OpenEnum(TIERS),
    from_region: Type.String(),
    requested_tier: OpenEnum(TIERS),
    requested_region: Nullable(Type.String()),
    status: OpenEnum(REQUEST_STATUSES),
    reason: Type.String(),
    scheduled_for: NullableTimestamp,
    notes: Nullable(Type.String()),
    requested_by: Nullable(Type.String()),
    created_at: Timestamp,
    started_at: NullableTimestamp,
    completed_at: NullableTimestamp,
  },
  { $id: 'TierChangeRequest', title: 'TierChangeRequest' },
);
export type TierChangeRequest = Static<typeof TierChangeRequest>;

export const CreateTierChangeBody = Type.Object(
  {
    requested_tier: literals(TIERS),
    // Checked against the allow-list by the service, so an unknown region answers unsupported_region.
    requested_region: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 64 }))),
    reason: Type.String({ minLength: 1, maxLength: 2000 }),
  },
  { additionalProperties: false },
);
export type CreateTierChangeBody = Static<typeof CreateTierChangeBody>;

/** Read-only fields are accepted by the schema so the service answers 422 read_only_field. */
export const TIER_CHANGE_READ_ONLY = ['id', 'tenant_id', 'from_tier', 'from_region', 'requested_tier', 'requested_region', 'reason', 'requested_by', 'created_at', 'started_at', 'completed_at'] as const;
export const PatchTierChangeBody = Type.Object(
  {
    status: Type.Optional(literals(REQUEST_STATUSES)),
    scheduled_for: Type.Optional(Type.String({ format: 'date-time' })),
    notes: Type.Optional(Nullable(Type.String({ maxLength: 2000 }))),
    ...readOnlyProperties(TIER_CHANGE_READ_ONLY),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type PatchTierChangeBody = { status?: (typeof REQUEST_STATUSES)[number]; scheduled_for?: string; notes?: string | null } & Record<string, unknown>;

/** Terminal requests (completed, cancelled) are listed only with include_inactive (Part A convention 12). */
export const TierChangeListQuery = Type.Object({ ...IncludeInactiveQuery, ...PageQuery }, { additionalProperties: false });
export type TierChangeListQuery = Static<typeof TierChangeListQuery>;

const Limit = Nullable(Type.Integer());
export const Usage = Type.Object(
  {
    tenant_id: Type.String(),
    plan: OpenEnum(PLAN_NAMES),
    limits: Type.Object({
      applications: Type.Object({ limit: Limit, current: Type.Integer() }),
      seats: Type.Object({ limit: Limit, current: Type.Integer(), included: Limit }),
      app_roles: Type.Object({ limit: Limit, current: Type.Integer() }),
      webhooks: Type.Object({ limit: Limit, current: Type.Integer() }),
      audit_hot_window_days: Type.Object({ limit: Limit }),
    }),
    fits_plans: Type.Array(OpenEnum(PLAN_NAMES)),
  },
  { $id: 'Usage', title: 'Usage' },
);
export type Usage = Static<typeof Usage>;
