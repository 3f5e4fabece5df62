import { Type, type Static } from '@sinclair/typebox';

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

export const LoginBody = Type.Object(
  {
    email: Type.String({ minLength: 1, maxLength: 320 }),
    password: Type.String({ minLength: 1, maxLength: 1024 }),
    test_mode: Type.Optional(Type.Boolean({ default: false })),
  },
  { additionalProperties: false },
);
export type LoginBody = Static<typeof LoginBody>;
