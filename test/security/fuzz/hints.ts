// Domain knowledge the schemas do not carry: which pool of fixture ids a parameter or field names,
// the URL and credential shapes services accept, and whole-body recipes for the operations whose
// valid requests need server state (single-use tokens, PKCE codes, signed processor events).
import fc from 'fast-check';
import { Lazy } from './lazy.js';
import type { Hint, Schema } from './schema-arbitraries.js';
import type { Operation } from './operations.js';
import type { Pool, World } from './world.js';
import { PASSWORD } from '../../helpers/fixtures.js';

const REGIONS = ['us-east-1', 'us-west-2', 'ca-central-1', 'eu-west-1', 'eu-central-1', 'ap-southeast-2', 'mars-north-1'];
const TARGET_TYPES = ['user', 'application', 'entitlement', 'organization', 'role', 'webhook', 'api_key', 'tenant', 'session'];
const AUDIT_ACTIONS = ['user.created', 'application.created', 'entitlement.granted', 'role.assigned', 'webhook.created', 'organization.created'];
const PATH_POOLS: Record<string, Pool> = {
  users: 'user', applications: 'application', entitlements: 'entitlement', roles: 'role', organizations: 'organization', webhooks: 'webhook',
  tenants: 'tenant', 'api-keys': 'apiKey', 'audit-events': 'auditEvent', checkout: 'checkout', portal: 'portal',
};
const NAMED_POOLS: Record<string, Pool> = {
  sessionId: 'session', appId: 'application', roleId: 'role', userId: 'user', requestId: 'tierRequest', deliveryId: 'delivery',
  application_id: 'application', client_id: 'application', user_id: 'user', owner_user_id: 'user', target_user_id: 'user',
  organization_id: 'organization', owner_organization_id: 'organization', tenant_id: 'tenant', role_id: 'role', actor_id: 'user',
};
// Ids that exist only once the request is materialized: a caller's own session, a fresh checkout.
const LAZY_EXTRAS: Partial<Record<Pool, Lazy[]>> = { session: [new Lazy('caller_session')], checkout: [new Lazy('fresh_checkout'), new Lazy('fresh_checkout'), new Lazy('fresh_checkout')] };
const BAD_IDS = ['usr_00000000000000000000000000', 'app_missing', 'ent_01HZZZZZZZZZZZZZZZZZZZZZZZ', 'null', '0', '-1', "1' OR '1'='1", '%00', '😀', 'me'];

export const httpsUrl = fc.stringMatching(/^[a-z0-9-]{1,12}(\/[a-z0-9._-]{0,12}){0,2}$/).map((p) => `https://app.example.com/${p}`);
const webhookUrl = fc.oneof(
  { arbitrary: fc.stringMatching(/^[a-z0-9]{1,12}$/).map((p) => `https://hooks.example.com/${p}`), weight: 5 },
  { arbitrary: fc.constantFrom('http://hooks.example.com/x', 'https://127.0.0.1/x', 'https://[::1]/x', 'https://user:pw@hooks.example.com/', 'https://169.254.169.254/latest', 'ftp://x', 'not a url'), weight: 1 },
);

function fromPool(world: World, pool: Pool, extra: unknown[] = []): fc.Arbitrary<unknown> | null {
  const ids = [...world.pool(pool), ...extra];
  return ids.length ? fc.constantFrom(...ids) : null;
}

/** The path parameter's arbitrary: fixture ids of the resource it names, mixed with wrong ids. */
export function pathParamHint(world: World, op: Operation, name: string): fc.Arbitrary<unknown> | null {
  const segments = op.path.split('/');
  const before = segments[segments.indexOf(`{${name}}`) - 1] ?? '';
  const pool = name === 'id' ? PATH_POOLS[before] : NAMED_POOLS[name];
  if (name === 'provider') return fc.constantFrom('google', 'github', 'okta', 'saml');
  if (!pool) return null;
  const real = op.path.endsWith('/invitation')
    ? fromPool(world, 'invitedUser')
    : op.path.endsWith('/erasure-requests/current')
      ? fromPool(world, 'user', [new Lazy('erasure_scheduled_user'), new Lazy('erasure_scheduled_user'), new Lazy('erasure_scheduled_user')])
      : fromPool(world, pool, LAZY_EXTRAS[pool] ?? []);
  const wrong = fc.constantFrom(...BAD_IDS, ...world.pool('application').slice(0, 1), ...world.pool('user').slice(0, 1));
  const choices: fc.WeightedArbitrary<unknown>[] = [{ arbitrary: wrong, weight: 1 }];
  if (real) choices.push({ arbitrary: real, weight: 6 });
  // Self-service operations (password, MFA, sessions) act on the caller: aim at "me" as often.
  if (pool === 'user') choices.push({ arbitrary: fc.constantFrom(new Lazy('caller_id'), 'me'), weight: 4 });
  return fc.oneof(...choices);
}

/** Field hints for bodies and query strings of one operation. */
export function fieldHint(world: World, op: Operation): Hint {
  return (name: string, schema: Schema) => {
    const isString = schema.type === 'string' && !schema.enum;
    const isStringArray = schema.type === 'array' && schema.items?.type === 'string' && !schema.items?.enum;
    if (isStringArray) {
      if (name === 'permissions') return fc.uniqueArray(fc.constantFrom(...world.pool('permission')), { maxLength: 4 });
      if (name === 'member_overrides') return fc.uniqueArray(fc.constantFrom(...world.pool('user')), { maxLength: 3 });
      if (name === 'redirect_uris') return fc.uniqueArray(httpsUrl, { maxLength: 3 });
      if (name === 'action') return fc.uniqueArray(fc.constantFrom(...AUDIT_ACTIONS), { minLength: 1, maxLength: 3 });
      return null;
    }
    if (!isString && !(schema.anyOf && name.endsWith('_url'))) return null;
    const pool = NAMED_POOLS[name];
    if (pool) return fromPool(world, pool, pool === 'user' ? [new Lazy('caller_id')] : []);
    switch (name) {
      case 'scope':
        return fromPool(world, 'application', ['platform', 'platform', 'platform']);
      case 'email':
        return emailHint(world, op);
      case 'password':
      case 'new_password':
        return fc.oneof(fc.constant(PASSWORD), fc.stringMatching(/^[a-z]{4}-[a-z]{4}-[A-Z][a-z]{4}-[0-9]{3}$/), fc.constantFrom('password', 'short', 'a'.repeat(4096)));
      case 'current_password':
        return fc.constantFrom(PASSWORD, 'wrong-password-xyz');
      case 'url':
        return webhookUrl;
      case 'redirect_uri':
        return fromPool(world, 'redirectUri', ['https://evil.example.net/cb']);
      case 'slug':
        return fc.stringMatching(/^[a-z][a-z0-9-]{2,20}$/);
      case 'locale':
        return fc.constantFrom('en', 'en-US', 'fr-CA', 'de', 'zh-Hant-TW', 'x-klingon', 'EN_us', 'zz');
      case 'requested_region':
        return fc.constantFrom(...REGIONS);
      case 'target_type':
        return fc.constantFrom(...TARGET_TYPES);
      case 'target_id':
        return fc.constantFrom(...world.pool('user'), ...world.pool('application'), ...world.pool('entitlement'));
      case 'order_id':
        return fc.stringMatching(/^ord_[a-z0-9]{4,10}$/);
      case 'cursor':
        return fc.constant(new Lazy('cursor'));
      case 'refresh_token':
        return fc.constant(new Lazy('refresh_token'));
      case 'token':
        return tokenHint(op);
      case 'code':
        return op.path.endsWith('/confirm') ? fc.constant(new Lazy('caller_totp_pending')) : null;
      case 'recovery_code':
        return fc.constant(new Lazy('caller_recovery_code'));
      case 'default_app_role':
        return fc.constantFrom('viewer', 'editor');
    }
    if (name.endsWith('_url')) return httpsUrl;
    return null;
  };
}

function emailHint(world: World, op: Operation): fc.Arbitrary<unknown> {
  const existing = fc.constantFrom(...world.pool('email'));
  const fresh = fc.constant(new Lazy('fresh_email'));
  const creates = op.method === 'POST' && /\/(signup|users|members)$/.test(op.path);
  return creates ? fc.oneof({ arbitrary: fresh, weight: 4 }, { arbitrary: existing, weight: 1 }) : fc.oneof({ arbitrary: existing, weight: 4 }, { arbitrary: fresh, weight: 1 });
}

function tokenHint(op: Operation): fc.Arbitrary<unknown> | null {
  if (op.path.endsWith('/email/verify')) return fc.constant(new Lazy('verify_token'));
  if (op.path.endsWith('/password/reset')) return fc.constant(new Lazy('reset_token'));
  if (op.path.endsWith('/invitations/accept')) return fc.constant(new Lazy('invite_token'));
  return null;
}

/** Whole-body recipes: valid requests that need coordinated fields or server state. */
export function bodyRecipe(world: World, op: Operation): fc.Arbitrary<unknown> | null {
  switch (op.key) {
    case 'POST /v1/auth/oauth/token':
      return fc.constantFrom(new Lazy('oauth_code_body'), new Lazy('oauth_refresh_body'));
    case 'POST /v1/auth/app-tokens':
      return fc.record({ application_id: fc.constant(world.app.id), organization_id: fc.constantFrom(...world.pool('organization')) }, { requiredKeys: ['application_id'] });
    case 'POST /v1/auth/oauth/authorization-codes':
      return fc.record(
        {
          application_id: fc.constant(world.app.id), redirect_uri: fc.constantFrom(world.app.redirectUri, `${world.app.redirectUri}/other`, 'https://evil.example.net/cb'),
          code_challenge: fc.stringMatching(/^[A-Za-z0-9_-]{43}$/), code_challenge_method: fc.constant('S256'), state: fc.string({ maxLength: 40 }),
        },
        { requiredKeys: ['application_id', 'redirect_uri', 'code_challenge', 'code_challenge_method'] },
      );
    case 'POST /v1/auth/mfa/verify':
      return fc.constant(new Lazy('mfa_verify_body'));
    case 'POST /v1/users/{id}/mfa/totp/disable':
      return fc.constant({ recovery_code: new Lazy('caller_recovery_code') });
    case 'POST /v1/auth/login':
      return fc.record({ email: fc.constantFrom(...world.pool('activeEmail'), ...world.pool('email')), password: fc.constantFrom(PASSWORD, PASSWORD, 'not-the-password') });
    case 'PATCH /v1/entitlements/{id}':
      return fc.oneof(
        fc.record({ status: fc.constant('disabled'), disabled_reason: fc.constantFrom('fraud review', 'chargeback') }),
        fc.record({ status: fc.constantFrom('active', 'revoked') }),
        fc.record({ ends_at: fc.integer({ min: 3600, max: 300 * 86400 }).map((s) => new Date(Date.now() + s * 1000).toISOString()) }),
        fc.record({ order_id: fc.stringMatching(/^ord_[a-z0-9]{4,10}$/) }),
        fc.record({ member_scope: fc.constantFrom('all_members', 'allowlist', 'denylist'), member_overrides: fc.uniqueArray(fc.constantFrom(...world.pool('user')), { maxLength: 2 }) }),
      );
    case 'POST /v1/applications':
      return fc.tuple(fc.stringMatching(/^[a-z][a-z0-9]{3,16}$/), fc.constantFrom('public', 'invite_only', 'internal')).map(([slug, visibility]) => ({
        slug, name: `App ${slug}`, launch_url: `https://${slug}.example.com/`, owner_user_id: new Lazy('fresh_user_id'), visibility,
        permissions: [{ key: `app.${slug}.read`, description: 'read' }], available_app_roles: ['viewer'], default_app_role: 'viewer', redirect_uris: [`https://${slug}.example.com/cb`],
      }));
    case 'PATCH /v1/tenants/{id}/tier-change-requests/{requestId}':
      return fc.oneof(
        fc.record({ status: fc.constant('scheduled'), scheduled_for: fc.integer({ min: 3600, max: 90 * 86400 }).map((s) => new Date(Date.now() + s * 1000).toISOString()) }),
        fc.record({ status: fc.constantFrom('in_progress', 'completed', 'pending') }),
        fc.record({ status: fc.constant('cancelled'), notes: fc.constantFrom('customer withdrew', ' ') }),
        fc.record({ notes: fc.oneof(fc.string({ maxLength: 40 }), fc.constant(null)) }),
      );
    case 'POST /v1/webhooks':
      return fc.record({
        scope: fc.constantFrom('platform', ...world.pool('application')), url: fieldHint(world, op)('url', { type: 'string' })!,
        events: fc.uniqueArray(fc.constantFrom('*', 'access.granted', 'user.suspended', 'webhook.test'), { minLength: 1, maxLength: 3 }), description: fc.string({ maxLength: 20 }),
      }, { requiredKeys: ['scope', 'url', 'events'] });
    case 'POST /v1/organizations/{id}/members':
      return fc.oneof(
        fc.record({ user_id: fc.constantFrom(...world.pool('user')), role: fc.constantFrom('member', 'org_admin') }),
        fc.record({ email: fc.constant(new Lazy('fresh_email')), role: fc.constantFrom('member', 'org_admin') }),
      );
    case 'POST /v1/billing/processor-events':
      return processorEvent(world);
  }
  return null;
}

const SUBSCRIPTION_STATUSES = ['active', 'trialing', 'past_due', 'canceled', 'unpaid', 'incomplete', 'incomplete_expired', 'paused', 'weird'];
const EVENT_TYPES = ['customer.subscription.created', 'customer.subscription.updated', 'customer.subscription.deleted', 'checkout.session.completed', 'invoice.paid', 'invoice.payment_failed', 'charge.refunded'];

/** Stripe-shaped events, signed or not by the sender, with fields that drift from Stripe's shape. */
function processorEvent(world: World): fc.Arbitrary<unknown> {
  const now = Math.floor(Date.now() / 1000);
  const period = fc.oneof(fc.integer({ min: now - 86400 * 40, max: now + 86400 * 40 }), fc.constantFrom(null, 'soon', -1, 1e15));
  const item = fc.record({
    id: fc.constant('si_fz'), quantity: fc.oneof(fc.constant(1), fc.integer()), current_period_start: period, current_period_end: period,
    price: fc.record({ id: fc.constant('price_fz'), lookup_key: fc.constantFrom('team', 'enterprise', 'starter', 'addon_sso', null, 42), unit_amount: fc.oneof(fc.integer({ min: 0, max: 100000 }), fc.constant(null)) }),
  });
  const object = fc.record(
    {
      id: fc.stringMatching(/^(sub|cs|in)_[a-z0-9]{4,8}$/), object: fc.constantFrom('subscription', 'checkout.session', 'invoice'), customer: fc.stringMatching(/^cus_[a-z0-9]{4}$/),
      subscription: fc.stringMatching(/^sub_[a-z0-9]{4}$/), status: fc.constantFrom(...SUBSCRIPTION_STATUSES), cancel_at_period_end: fc.oneof(fc.boolean(), fc.constant('yes')),
      metadata: fc.oneof(fc.record({ tenant_id: fc.constantFrom(...world.pool('tenant'), 'tnt_missing', '') }), fc.constant(null), fc.constant({})),
      items: fc.oneof(fc.record({ object: fc.constant('list'), data: fc.array(item, { maxLength: 3 }) }), fc.constantFrom(null, [], { data: 'x' })),
      client_reference_id: fc.constantFrom(...world.pool('tenant')),
    },
    { requiredKeys: ['id', 'object'] },
  );
  return fc.record({
    id: fc.stringMatching(/^evt_[a-z0-9]{6,10}$/), object: fc.constant('event'), type: fc.constantFrom(...EVENT_TYPES),
    created: fc.oneof({ arbitrary: fc.integer({ min: now - 86400 * 30, max: now + 60 }), weight: 6 }, { arbitrary: fc.constantFrom('yesterday', null), weight: 1 }), livemode: fc.boolean(),
    data: fc.oneof({ arbitrary: fc.record({ object }), weight: 6 }, { arbitrary: fc.constantFrom(null, {}, { object: null }, { object: [] }), weight: 1 }),
  }, { requiredKeys: ['id', 'type', 'created', 'data'] });
}
