import { Type, type Static } from '@sinclair/typebox';

// The page's inputs are schema-checked for type and size only (a repeated parameter, a number in a
// JSON body, a huge value); what they mean is checked by the service so the page can say what is wrong.
// Unknown parameters are ignored (RFC 6749 §3.1), as an authorization endpoint must.
const text = (maxLength: number) => Type.Optional(Type.String({ maxLength }));

const authorization = {
  application_id: text(200),
  /** The OAuth name of application_id (what standard clients send); both must agree when both are given. */
  client_id: text(200),
  redirect_uri: text(4096),
  code_challenge: text(1024),
  code_challenge_method: text(64),
  state: text(4096),
  response_type: text(64),
};

export const AuthorizationQuery = Type.Object(authorization, { additionalProperties: true });
export type AuthorizationQuery = Static<typeof AuthorizationQuery>;

export const SigninForm = Type.Object(
  {
    ...authorization,
    csrf: text(200),
    email: text(320),
    password: text(1024),
    mfa_token: text(200),
    code: text(32),
    recovery_code: text(64),
  },
  { additionalProperties: true },
);
export type SigninForm = Static<typeof SigninForm>;

/** The forms of the page; each carries its own CSRF token. */
export type FormName = 'password' | 'mfa' | 'continue';
