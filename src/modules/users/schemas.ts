import { Type, type Static } from '@sinclair/typebox';
import { Nullable, NullableTimestamp, OpenEnum, Timestamp } from '../../http/schemas.js';

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
