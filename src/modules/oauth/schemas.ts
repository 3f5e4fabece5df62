import { Type, type Static } from '@sinclair/typebox';

/** PKCE code challenge: base64url of a SHA-256 digest is 43 characters; RFC 7636 allows up to 128. */
export const CHALLENGE_PATTERN = '^[A-Za-z0-9_-]{43,128}$';

export const AuthorizationCodeBody = Type.Object(
  {
    application_id: Type.String({ minLength: 1, maxLength: 100 }),
    redirect_uri: Type.String({ minLength: 1, maxLength: 2048 }),
    code_challenge: Type.String({ minLength: 43, maxLength: 128, pattern: CHALLENGE_PATTERN, description: 'base64url(SHA-256(code_verifier)), no padding.' }),
    code_challenge_method: Type.Literal('S256'),
    state: Type.Optional(Type.String({ maxLength: 512 })),
  },
  { additionalProperties: false },
);
export type AuthorizationCodeBody = Static<typeof AuthorizationCodeBody>;

export const AuthorizationCode = Type.Object(
  {
    code: Type.String({ description: 'Single use; exchange it at POST /v1/auth/oauth/token within expires_in seconds.' }),
    expires_in: Type.Integer(),
    redirect_to: Type.String({ description: 'redirect_uri with code, state (when given) and iss (the issuer, RFC 9207) added to its query.' }),
  },
  { $id: 'AuthorizationCode', title: 'AuthorizationCode' },
);
export type AuthorizationCode = Static<typeof AuthorizationCode>;

/**
 * The token request (JSON or application/x-www-form-urlencoded). Parameters are checked by the
 * service, not the schema, so every problem answers in the OAuth error shape.
 */
export const TokenBody = Type.Object(
  {
    grant_type: Type.Optional(Type.String({ description: 'authorization_code or refresh_token' })),
    code: Type.Optional(Type.String()),
    code_verifier: Type.Optional(Type.String()),
    redirect_uri: Type.Optional(Type.String()),
    client_id: Type.Optional(Type.String({ description: 'The application id.' })),
    refresh_token: Type.Optional(Type.String()),
  },
  { additionalProperties: true },
);
export type TokenBody = Record<string, unknown>;

export const TokenResponse = Type.Object(
  {
    access_token: Type.String({ description: 'App token: RS256 JWT, aud = client_id; verify against the JWKS.' }),
    token_type: Type.Literal('Bearer'),
    expires_in: Type.Integer(),
    refresh_token: Type.String({ description: 'App refresh token (rtk_), single use, rotating, bound to this Application.' }),
    refresh_token_expires_in: Type.Integer(),
    // Part A: "200 app token plus refresh_token and refresh_token_expires_in": the app token's fields
    // as POST /v1/auth/app-tokens returns them (no Organization is attributed in the hosted flow).
    application_id: Type.String({ description: 'The Application the token is for (its aud, the client_id).' }),
    organization_id: Type.Null({ description: 'Always null: the hosted flow attributes no Organization grant.' }),
  },
  { $id: 'OAuthTokenResponse', title: 'OAuthTokenResponse' },
);
export type TokenResponse = Static<typeof TokenResponse>;

export const OAuthErrorBody = Type.Object(
  {
    error: Type.Union([Type.Literal('invalid_request'), Type.Literal('invalid_grant'), Type.Literal('invalid_client'), Type.Literal('unsupported_grant_type')]),
    error_description: Type.String(),
  },
  { $id: 'OAuthError', title: 'OAuthError', description: 'RFC 6749 §5.2 error (not the usual envelope).' },
);
export type OAuthErrorBody = Static<typeof OAuthErrorBody>;

/**
 * The per-IP auth throttle at the token endpoint: 429 with Retry-After, in the RFC 6749 shape.
 * `temporarily_unavailable` is RFC 6749's code for "cannot handle the request now, retry later"
 * (§4.1.2.1); §5.2 has no throttling code, and a client that reads only `error` needs a string.
 */
export const OAuthThrottledBody = Type.Object(
  {
    error: Type.Literal('temporarily_unavailable'),
    error_description: Type.String(),
  },
  { $id: 'OAuthThrottled', title: 'OAuthThrottled', description: 'Per-IP throttle: temporarily_unavailable in the RFC 6749 shape; Retry-After set.' },
);
export type OAuthThrottledBody = Static<typeof OAuthThrottledBody>;

export type OAuthErrorCode = OAuthErrorBody['error'];

/** The token endpoint's only error type; its route turns it into 400 {error, error_description}. */
export class OAuthError extends Error {
  constructor(readonly error: OAuthErrorCode, readonly description: string) {
    super(description);
  }

  toBody(): OAuthErrorBody {
    return { error: this.error, error_description: this.description };
  }
}
