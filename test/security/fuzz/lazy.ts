// Values that cannot be generated ahead of time because they are single-use or tied to server state
// (refresh tokens, mailed tokens, authorization codes, TOTP codes, ETags, cursors, signatures). An
// arbitrary places a Lazy marker; it is materialized right before the request is sent.
import { createHash, randomBytes } from 'node:crypto';
import { generate } from 'otplib';
import { PASSWORD } from '../../helpers/fixtures.js';
import { sql } from '../../helpers/http.js';
import { rand, type Principal, type World } from './world.js';
export { stripeSignature } from './signature.js';

export type LazyKind =
  | 'caller_id' | 'fresh_email' | 'fresh_user_id' | 'idempotency_key' | 'refresh_token' | 'verify_token' | 'reset_token' | 'invite_token'
  | 'mfa_verify_body' | 'caller_totp_pending' | 'caller_recovery_code' | 'oauth_code_body' | 'oauth_refresh_body' | 'etag' | 'cursor'
  | 'stripe_signature' | 'fresh_checkout' | 'caller_session' | 'erasure_scheduled_user';

export class Lazy {
  constructor(readonly kind: LazyKind) {}
  toJSON(): string {
    return `<${this.kind}>`;
  }
}

export interface MaterializeContext {
  world: World;
  caller: Principal | null;
  /** The operation's path template and the path parameters already materialized. */
  path: string;
  params: Record<string, string>;
}

let sequence = 0;

/** Replaces every Lazy inside `value` (depth first, so bundles resolve to whole objects). */
export async function materialize(value: unknown, ctx: MaterializeContext): Promise<unknown> {
  if (value instanceof Lazy) return resolve(value.kind, ctx);
  if (Array.isArray(value)) return Promise.all(value.map((v) => materialize(v, ctx)));
  if (value && typeof value === 'object') {
    const out: Record<string, unknown> = {};
    for (const [k, v] of Object.entries(value)) out[k] = await materialize(v, ctx);
    return out;
  }
  return value;
}

async function resolve(kind: LazyKind, ctx: MaterializeContext): Promise<unknown> {
  const { world } = ctx;
  switch (kind) {
    case 'caller_id':
      return ctx.caller?.id ?? world.actor.id;
    case 'erasure_scheduled_user': {
      const person = await world.newPerson();
      await world.call('POST', `/v1/users/${person.id}/erasure-requests`, world.actor.token, { reason: 'fuzz' });
      return person.id;
    }
    case 'caller_session':
      return ctx.caller?.sessionId ?? world.actor.sessionId;
    case 'fresh_email':
      return world.fresh();
    case 'fresh_user_id':
      return (await world.newPerson()).id;
    case 'idempotency_key':
      return `fz-${++sequence}-${rand(6)}`;
    case 'refresh_token':
      return (await world.newPerson()).refreshToken;
    case 'verify_token': {
      const email = world.fresh('verify');
      await world.call('POST', '/v1/auth/signup', null, { email, password: strongPassword() });
      return mailedToken(world, email);
    }
    case 'reset_token': {
      const person = await world.newPerson();
      await world.call('POST', '/v1/auth/password/forgot', null, { email: person.email });
      return mailedToken(world, person.email);
    }
    case 'invite_token': {
      const email = world.fresh('invite');
      await world.call('POST', '/v1/users', world.actor.token, { email, status: 'invited', send_invitation: true });
      return mailedToken(world, email);
    }
    case 'mfa_verify_body': {
      const person = await world.newPerson();
      const { secret, recoveryCodes } = await enableTotp(world, person);
      const challenge = await world.call('POST', '/v1/auth/login', null, { email: person.email, password: PASSWORD });
      const mfaToken = challenge.json().mfa_token ?? 'missing';
      return sequence++ % 2 ? { mfa_token: mfaToken, recovery_code: recoveryCodes[0] } : { mfa_token: mfaToken, code: await totp(secret, 1) };
    }
    case 'caller_totp_pending': {
      if (!ctx.caller) return '000000';
      const begin = await world.call('POST', '/v1/users/me/mfa/totp', ctx.caller.token);
      return begin.statusCode === 200 ? await totp(begin.json().secret, 0) : '000000';
    }
    case 'caller_recovery_code':
      return ctx.caller ? ((await enableTotp(world, ctx.caller)).recoveryCodes[0] ?? 'aaaaa-aaaaa') : 'aaaaa-aaaaa';
    case 'oauth_code_body':
      return authorizationCode(world);
    case 'oauth_refresh_body': {
      const exchange = await world.call('POST', '/v1/auth/oauth/token', null, await authorizationCode(world));
      const body = exchange.json();
      return { grant_type: 'refresh_token', refresh_token: body.refresh_token ?? 'missing', client_id: world.app.id };
    }
    case 'etag': {
      const res = await world.call('GET', `/v1/entitlements/${encodeURIComponent(ctx.params.id ?? '')}`, world.actor.token);
      return String(res.headers.etag ?? '"stale"');
    }
    case 'cursor': {
      const url = ctx.path.replace(/\{(\w+)\}/g, (_, name) => encodeURIComponent(ctx.params[name] ?? ''));
      const res = await world.call('GET', `${url}?limit=1`, ctx.caller?.token ?? world.actor.token);
      return (res.statusCode === 200 && res.json().page?.next_cursor) || 'bm90LWEtY3Vyc29y';
    }
    case 'fresh_checkout': {
      const res = await world.call('POST', `/v1/tenants/${world.starterTenant}/billing/checkout-sessions`, world.starterOwner.token,
        { plan: 'team', success_url: 'https://app.example.com/ok', cancel_url: 'https://app.example.com/no' }, { 'idempotency-key': `fz-${rand(8)}` });
      return res.statusCode === 201 ? new URL(res.json().url).pathname.split('/').filter(Boolean)[3] : 'cs_sim_unavailable';
    }
    case 'stripe_signature':
      return kind; // computed over the exact body bytes by the sender (see stripeSignature)
  }
}

export const strongPassword = () => `fz-${rand(6)}-Cobalt-Meadow!`;


const totp = (secret: string, steps: number): Promise<string> => generate({ secret, epoch: Math.floor(Date.now() / 1000) + steps * 30 });

async function enableTotp(world: World, who: Principal): Promise<{ secret: string; recoveryCodes: string[] }> {
  const begin = await world.call('POST', '/v1/users/me/mfa/totp', who.token);
  if (begin.statusCode !== 200) return { secret: 'JBSWY3DPEHPK3PXP', recoveryCodes: [] };
  const secret = begin.json().secret;
  const confirm = await world.call('POST', '/v1/users/me/mfa/totp/confirm', who.token, { code: await totp(secret, 0) });
  return { secret, recoveryCodes: confirm.statusCode === 200 ? confirm.json().recovery_codes : [] };
}

async function mailedToken(world: World, email: string): Promise<string> {
  const rows = await sql<{ text_body: string }>(world.t, 'SELECT text_body FROM emails WHERE lower(to_address) = lower($1) ORDER BY created_at DESC LIMIT 1', [email]);
  const match = /token=([^\s&]+)/.exec(rows[0]?.text_body ?? '');
  return match ? decodeURIComponent(match[1]) : 'no-mailed-token';
}

/** A fresh code for the latest seed's Application (its owner holds a grant), with its PKCE verifier. */
async function authorizationCode(world: World): Promise<Record<string, string>> {
  const verifier = randomBytes(32).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const { id: clientId, redirectUri } = world.app;
  const res = await world.call('POST', '/v1/auth/oauth/authorization-codes', world.owner.token, {
    application_id: clientId, redirect_uri: redirectUri, code_challenge: challenge, code_challenge_method: 'S256',
  });
  const code = res.statusCode === 201 ? res.json().code : 'no-code';
  return { grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: redirectUri, client_id: clientId };
}
