import { Type, type Static } from '@sinclair/typebox';
import { Nullable, NullableTimestamp, OpenEnum, PageQuery, readOnlyProperties, Timestamp } from '../../http/schemas.js';
import { USER_STATUSES } from '../users/schemas.js';
import { SOURCES } from '../entitlements/schemas.js';

/** An entitlement row's status resolved at a moment (a future starts_at reads scheduled). */
export const PATH_STATUSES = ['active', 'scheduled', 'disabled', 'expired', 'revoked'] as const;

export const Role = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    scope: Type.String(),
    description: Nullable(Type.String()),
    permissions: Type.Array(Type.String()),
    seed: Type.Boolean(),
    assignment_count: Type.Integer(),
    created_at: Timestamp,
    updated_at: Timestamp,
  },
  { $id: 'Role', title: 'Role' },
);
export type Role = Static<typeof Role>;

export const Assignment = Type.Object(
  {
    user_id: Type.String(),
    role_id: Type.String(),
    application_id: Nullable(Type.String()),
    assigned_at: NullableTimestamp,
    assigned_by: Nullable(Type.Object({ type: Type.String(), id: Nullable(Type.String()) })),
    implicit: Type.Boolean(),
  },
  { $id: 'RoleAssignment', title: 'RoleAssignment' },
);
export type Assignment = Static<typeof Assignment>;

export const PermissionItem = Type.Object({ key: Type.String(), scope: Type.String(), description: Type.String() }, { $id: 'Permission', title: 'Permission' });

export const EffectivePermissions = Type.Object(
  {
    user_id: Type.String(),
    application_id: Type.String(),
    allowed: Type.Boolean(),
    user_status: OpenEnum(USER_STATUSES),
    entitlement_status: OpenEnum([...PATH_STATUSES, 'none'] as const),
    access_paths: Type.Array(
      Type.Object({
        source: OpenEnum(SOURCES),
        entitlement_id: Type.String(),
        status: OpenEnum(PATH_STATUSES),
        organization_id: Type.Optional(Nullable(Type.String())),
        member_decision: Type.Optional(OpenEnum(['included', 'excluded', 'seat_limit'] as const)),
      }),
    ),
    roles: Type.Array(Type.Object({ role_id: Type.String(), name: Type.String(), implicit: Type.Boolean() })),
    effective_permissions: Type.Array(Type.String()),
    computed_at: Timestamp,
  },
  { $id: 'EffectivePermissions', title: 'EffectivePermissions' },
);
export type EffectivePermissions = Static<typeof EffectivePermissions>;

const Permissions = Type.Array(Type.String({ minLength: 1, maxLength: 200 }), { maxItems: 200, uniqueItems: true });
export const CreateRoleBody = Type.Object(
  {
    name: Type.String({ pattern: '^[a-z][a-z0-9_]{1,40}$' }),
    scope: Type.String({ minLength: 1, maxLength: 100 }),
    description: Type.Optional(Nullable(Type.String({ maxLength: 1000 }))),
    permissions: Type.Optional(Permissions),
  },
  { additionalProperties: false },
);
export type CreateRoleBody = Static<typeof CreateRoleBody>;
/** Role fields PATCH cannot change (422 read_only_field): only permissions and description can. */
export const ROLE_READ_ONLY_FIELDS = ['id', 'name', 'scope', 'seed', 'assignment_count', 'created_at', 'updated_at'] as const;
export const PatchRoleBody = Type.Object(
  {
    description: Type.Optional(Nullable(Type.String({ maxLength: 1000 }))),
    permissions: Type.Optional(Permissions),
    ...readOnlyProperties(ROLE_READ_ONLY_FIELDS),
  },
  { additionalProperties: false },
);
export type PatchRoleBody = { description?: string | null; permissions?: string[] } & Partial<Record<(typeof ROLE_READ_ONLY_FIELDS)[number], unknown>>;
export const ScopeQuery = Type.Object(
  {
    scope: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type ScopeQuery = Static<typeof ScopeQuery>;
export const UserRolesQuery = Type.Object({ application_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })) }, { additionalProperties: false });
export const RoleIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 150 }) });
export const UserRoleParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), roleId: Type.String({ minLength: 1, maxLength: 150 }) });
export const UserAppParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), appId: Type.String({ minLength: 1, maxLength: 100 }) });
