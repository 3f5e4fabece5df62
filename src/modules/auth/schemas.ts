import { Type, type Static } from '@sinclair/typebox';
import { Name, OpenEnum } from '../../http/schemas.js';

export const AuthSession = Type.Object(
  {
    token_type: Type.Literal('Bearer'),
    access_token: Type.String(),
    expires_in: Type.Integer(),
    refresh_token: Type.String(),
    refresh_token_expires_in: Type.Integer(),
    session_id: Type.String(),
    user_id: Type.String(),
    email_verified: Type.Boolean(),
  },
  { $id: 'AuthSession', title: 'AuthSession' },
);
export type AuthSession = Static<typeof AuthSession>;

export const MfaChallenge = Type.Object(
  {
    mfa_required: Type.Literal(true),
    mfa_token: Type.String(),
    methods: Type.Array(OpenEnum(['totp', 'recovery_code'] as const)),
    expires_in: Type.Integer(),
  },
  { $id: 'MfaChallenge', title: 'MfaChallenge' },
);
export type MfaChallenge = Static<typeof MfaChallenge>;

const Email = Type.String({ format: 'email', maxLength: 320 });
/** A password to check against a stored hash (login, current_password). */
const Password = Type.String({ minLength: 1, maxLength: 4096 });
/**
 * A password to set: its length rules live in the password policy (422 weak_password, too_short or
 * too_long, however far out of range); the body limit bounds its size.
 */
const NewPassword = Type.String({ description: '12–128 characters (422 weak_password otherwise).' });
const TestMode = Type.Optional(Type.Boolean({ default: false }));

export const SignupBody = Type.Object(
  {
    email: Email,
    password: NewPassword,
    display_name: Type.Optional(Name(100)),
    application_id: Type.Optional(Type.String({ minLength: 1, maxLength: 100 })),
    test_mode: TestMode,
  },
  { additionalProperties: false },
);
export type SignupBody = Static<typeof SignupBody>;

export const LoginBody = Type.Object(
  { email: Type.String({ minLength: 1, maxLength: 320 }), password: Password, test_mode: TestMode },
  { additionalProperties: false },
);
export type LoginBody = Static<typeof LoginBody>;

export const MfaVerifyBody = Type.Object(
  {
    mfa_token: Type.String({ minLength: 1, maxLength: 200 }),
    code: Type.Optional(Type.String({ pattern: '^[0-9]{6}$' })),
    recovery_code: Type.Optional(Type.String({ minLength: 1, maxLength: 64 })),
  },
  { additionalProperties: false },
);
export type MfaVerifyBody = Static<typeof MfaVerifyBody>;

export const RefreshBody = Type.Object({ refresh_token: Type.String({ minLength: 1, maxLength: 4096 }) }, { additionalProperties: false });
export type RefreshBody = Static<typeof RefreshBody>;

export const TokenBody = Type.Object({ token: Type.String({ minLength: 1, maxLength: 200 }) }, { additionalProperties: false });
export type TokenBody = Static<typeof TokenBody>;

export const EmailBody = Type.Object({ email: Type.String({ minLength: 1, maxLength: 320 }), test_mode: TestMode }, { additionalProperties: false });
export type EmailBody = Static<typeof EmailBody>;

export const TokenPasswordBody = Type.Object(
  { token: Type.String({ minLength: 1, maxLength: 200 }), password: NewPassword },
  { additionalProperties: false },
);
export type TokenPasswordBody = Static<typeof TokenPasswordBody>;

export const ChangePasswordBody = Type.Object(
  { current_password: Password, new_password: NewPassword },
  { additionalProperties: false },
);
export type ChangePasswordBody = Static<typeof ChangePasswordBody>;
