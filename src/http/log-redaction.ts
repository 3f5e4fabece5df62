import { stdSerializers } from 'pino';

// What the logger may show of a request's URL and of an error: never a credential, never a stored
// row's values (docs/security.md, the AU-2 rows).

/**
 * Query parameters that carry a credential wherever a client puts them: the mailed links' `token`,
 * and the body fields of the sign-in, token and recovery operations, which a client may send in the
 * query by mistake (a refresh token so logged would stay valid for 30 days).
 */
const SECRET_PARAMETERS = new Set([
  'token', 'access_token', 'refresh_token', 'id_token', 'mfa_token', 'code', 'code_verifier', 'recovery_code',
  'password', 'current_password', 'new_password', 'client_secret', 'secret', 'signing_secret', 'api_key',
]);

// The service's secrets (a prefix and 32 random bytes, base64url: API keys, refresh tokens, codes,
// one-time tokens, webhook signing secrets) and JWTs (access and app tokens), wherever they appear.
const PREFIXED_SECRET = /(?<![A-Za-z0-9_-])(rtk_|oac_|mfa_|vrf_|pwr_|inv_|whsec_|plat_live_|plat_test_)[A-Za-z0-9_-]{43}(?![A-Za-z0-9_-])/g;
// The billing simulator's checkout and portal page ids (src/modules/billing/simulator-store.ts: 18
// random bytes): the only credential of pages whose buttons pay, cancel or fail a subscription.
const SIMULATOR_PAGE_ID = /(?<![A-Za-z0-9_-])(cs_sim_|bps_sim_)[A-Za-z0-9_-]{24}(?![A-Za-z0-9_-])/g;
const JWT = /(?<![A-Za-z0-9_-])eyJ[A-Za-z0-9_-]*\.[A-Za-z0-9_-]+\.[A-Za-z0-9_-]*/g;
const REDACTED = '[redacted]';

const parameterName = (raw: string): string => {
  try {
    return decodeURIComponent(raw.replace(/\+/g, ' ')).toLowerCase();
  } catch {
    return raw.toLowerCase();
  }
};

/** A URL as the request log may show it: credential query values and secret-shaped values replaced by `[redacted]`. */
export function redactUrl(url: string): string {
  const q = url.indexOf('?');
  let out = url;
  if (q !== -1) {
    const query = url.slice(q + 1).replace(/(^|&)([^&=#]*)=([^&#]*)/g, (whole, sep: string, name: string) =>
      SECRET_PARAMETERS.has(parameterName(name)) ? `${sep}${name}=${REDACTED}` : whole,
    );
    out = `${url.slice(0, q + 1)}${query}`;
  }
  return out.replace(PREFIXED_SECRET, `$1${REDACTED}`).replace(SIMULATOR_PAGE_ID, `$1${REDACTED}`).replace(JWT, REDACTED);
}

/**
 * An error as the log may show it: the standard serialization without the values of the failed
 * statement. The embedded database attaches the statement's parameters to its errors (`params`,
 * `queryOptions`), and PostgreSQL's `detail` quotes the row or key that failed a constraint; either
 * may hold a mailed link's token, a hash or an address. The statement text, the code, the
 * constraint and the stack stay.
 */
export function serializeError(err: unknown): unknown {
  const out = stdSerializers.err(err as Error) as unknown as Record<string, unknown>;
  if (!out || typeof out !== 'object') return out;
  delete out.params;
  delete out.queryOptions;
  if (typeof out.detail === 'string') {
    out.detail = out.detail.replace(/^(Failing row contains )\(.*\)\.?$/s, `$1(${REDACTED}).`).replace(/\)=\(.*?\)(?= already exists| is not present| conflicts|\.|$)/gs, `)=(${REDACTED})`);
  }
  return out;
}
