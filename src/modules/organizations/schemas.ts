import { Type, type Static } from '@sinclair/typebox';
import { Name, Nullable, NullableTimestamp, OpenEnum, PageQuery, readOnlyProperties, Timestamp } from '../../http/schemas.js';

export const Organization = Type.Object(
  {
    id: Type.String(),
    name: Type.String(),
    status: OpenEnum(['active', 'suspended'] as const),
    member_count: Type.Integer(),
    created_by: Type.String(),
    test_mode: Type.Boolean(),
    created_at: Timestamp,
    updated_at: Timestamp,
    my_role: Type.Optional(Nullable(OpenEnum(['org_admin', 'member'] as const))),
    my_membership_status: Type.Optional(Nullable(OpenEnum(['pending', 'active'] as const))),
  },
  { $id: 'Organization', title: 'Organization' },
);
export type Organization = Static<typeof Organization>;

export const Member = Type.Object(
  {
    user_id: Type.String(),
    email: Type.String(),
    display_name: Nullable(Type.String()),
    membership_status: OpenEnum(['pending', 'active'] as const),
    role: OpenEnum(['org_admin', 'member'] as const),
    invited_at: Timestamp,
    joined_at: NullableTimestamp,
  },
  { $id: 'Member', title: 'Member' },
);
export type Member = Static<typeof Member>;

const Role = Type.Union([Type.Literal('org_admin'), Type.Literal('member')]);
export const CreateOrgBody = Type.Object({ name: Name(100) }, { additionalProperties: false });
/** Organization fields a PATCH cannot write. */
export const ORG_READ_ONLY = ['id', 'member_count', 'created_by', 'test_mode', 'created_at', 'updated_at', 'my_role', 'my_membership_status'] as const;

export const PatchOrgBody = Type.Object(
  {
    name: Type.Optional(Name(100)),
    status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('suspended')])),
    reason: Type.Optional(Type.String({ maxLength: 1000 })),
    ...readOnlyProperties(ORG_READ_ONLY),
  },
  { additionalProperties: false, minProperties: 1 },
);
export type PatchOrgBody = Static<typeof PatchOrgBody>;
export const OrgListQuery = Type.Object(
  {
    status: Type.Optional(Type.Union([Type.Literal('active'), Type.Literal('suspended')])),
    q: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type OrgListQuery = Static<typeof OrgListQuery>;
export const AddMemberBody = Type.Object(
  { user_id: Type.Optional(Type.String({ maxLength: 64 })), email: Type.Optional(Type.String({ format: 'email', maxLength: 320 })), role: Type.Optional(Role) },
  { additionalProperties: false },
);
export type AddMemberBody = Static<typeof AddMemberBody>;
/** Member fields a PATCH cannot write (only the role changes). */
export const MEMBER_READ_ONLY = ['user_id', 'email', 'display_name', 'membership_status', 'invited_at', 'joined_at'] as const;
export const PatchMemberBody = Type.Object({ role: Role, ...readOnlyProperties(MEMBER_READ_ONLY) }, { additionalProperties: false });
export type PatchMemberBody = Static<typeof PatchMemberBody>;
export const MemberListQuery = Type.Object(
  {
    role: Type.Optional(Role),
    membership_status: Type.Optional(Type.Union([Type.Literal('pending'), Type.Literal('active')])),
    q: Type.Optional(Type.String({ minLength: 1, maxLength: 320 })),
    include_inactive: Type.Optional(Type.Boolean({ description: 'Include members whose User is soft-deleted.' })),
    ...PageQuery,
  },
  { additionalProperties: false },
);
export type MemberListQuery = Static<typeof MemberListQuery>;
export const OrgGrantBody = Type.Object(
  {
    application_id: Type.String({ minLength: 1, maxLength: 100 }),
    order_id: Type.Optional(Nullable(Type.String({ minLength: 1, maxLength: 255 }))),
    starts_at: Type.Optional(Type.String({ format: 'date-time', description: 'Default now; at most 1 year ahead (the same instant a calendar year later), else 422 validation_failed.' })),
    ends_at: Type.Optional(Nullable(Type.String({ format: 'date-time' }))),
    member_scope: Type.Optional(Nullable(Type.Union([Type.Literal('all_members'), Type.Literal('allowlist'), Type.Literal('denylist')]))),
    member_overrides: Type.Optional(Nullable(Type.Array(Type.String({ maxLength: 64 }), { maxItems: 10000, uniqueItems: true }))),
  },
  { additionalProperties: false },
);
export type OrgGrantBody = Static<typeof OrgGrantBody>;
export const OrgIdParam = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }) });
export const OrgMemberParams = Type.Object({ id: Type.String({ minLength: 1, maxLength: 64 }), userId: Type.String({ minLength: 1, maxLength: 64 }) });
