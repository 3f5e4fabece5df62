// How each operation of the document is called in a matrix cell: URL, body and headers against the
// fixtures of world.ts. Calls that may change or destroy their target take it from `pick` (see Pick), so
// a call that wrongly gets through never damages a fixture another cell needs. `reach` is true when the
// cell is expected to get past the gate.
import { createUser, PASSWORD } from '../../helpers/fixtures.js';
import type { Caller } from './callers.js';
import {
  freshEditor, freshErasureTarget, freshKey, freshOrg, freshOrgMember, freshPlatformRole, freshSession, freshTenant, freshUser, freshWebhook,
  rand, sessionOf, type World,
} from './world.js';

export interface Req {
  url: string;
  body?: unknown;
  headers?: Record<string, string>;
  /** Replaces the caller's credential (the same caller, a fresh session). */
  cred?: string | null;
}
/**
 * The target of a call that may change or destroy it: `fresh` (a throwaway made now) for cells
 * expected to succeed, `decoy` (one per operation, remade whenever a refused cell got through) for
 * cells the service must refuse, `ghost` (a well-formed id of nothing) for cells the gate must refuse.
 */
export type Pick = <T>(make: () => Promise<T>, ghost: T) => Promise<T>;
type Arrange = (w: World, c: Caller, pick: Pick, reach: boolean) => Promise<Req> | Req;

export interface OpCall {
  arrange: Arrange;
  /** List operations: the fixture rows the (filtered) request looks for; who must see them is in expectations.ts. */
  listed?: (w: World) => string[];
  /** The request meets the x-platform-destructive-when condition of a conditional operation. */
  destructiveNow?: boolean;
}

const STRONG = 'amber-lantern-orchard-77';
const nobody = () => `nobody-${rand()}@example.com`;
const idem = () => ({ 'idempotency-key': `mx-${rand(8)}` });
const future = () => new Date(Date.now() + 200 * 86400_000).toISOString();
const CHALLENGE = 'E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM';

const S = (w: World) => w.subject.id;
const at = (url: string, body?: unknown, headers?: Record<string, string>): Req => ({ url, body, headers });

export const CALLS: Record<string, OpCall> = {
  'GET /health': { arrange: () => at('/health') },
  'GET /.well-known/jwks.json': { arrange: () => at('/.well-known/jwks.json') },
  'GET /.well-known/openid-configuration': { arrange: () => at('/.well-known/openid-configuration') },
  'GET /.well-known/oauth-authorization-server': { arrange: () => at('/.well-known/oauth-authorization-server') },
  'GET /v1/openapi.json': { arrange: () => at('/v1/openapi.json') },
  'POST /v1/auth/signup': { arrange: (w) => at('/v1/auth/signup', { email: w.subject.email, password: STRONG }) },
  'POST /v1/auth/login': { arrange: () => at('/v1/auth/login', { email: nobody(), password: STRONG }) },
  'POST /v1/auth/mfa/verify': { arrange: () => at('/v1/auth/mfa/verify', { mfa_token: 'mfa_matrix', code: '123456' }) },
  'POST /v1/auth/token/refresh': { arrange: () => at('/v1/auth/token/refresh', { refresh_token: 'rtk_matrix' }) },
  'POST /v1/auth/email/verify': { arrange: () => at('/v1/auth/email/verify', { token: 'matrix' }) },
  'POST /v1/auth/email/verify/resend': { arrange: () => at('/v1/auth/email/verify/resend', { email: nobody() }) },
  'POST /v1/auth/password/forgot': { arrange: () => at('/v1/auth/password/forgot', { email: nobody() }) },
  'POST /v1/auth/password/reset': { arrange: () => at('/v1/auth/password/reset', { token: 'matrix', password: STRONG }) },
  'POST /v1/auth/invitations/accept': { arrange: () => at('/v1/auth/invitations/accept', { token: 'matrix', password: STRONG }) },
  'POST /v1/auth/sso/{provider}/callback': { arrange: () => at('/v1/auth/sso/matrix/callback') },
  'POST /v1/auth/oauth/token': {
    arrange: (w) =>
      at('/v1/auth/oauth/token', { grant_type: 'authorization_code', code: 'oac_matrix', code_verifier: 'v'.repeat(43), redirect_uri: `https://${w.appA.slug}.example.com/cb`, client_id: w.appA.id }),
  },
  'POST /v1/billing/processor-events': { arrange: () => at('/v1/billing/processor-events', { id: 'evt_matrix', type: 'invoice.paid' }) },
  'GET /billing/simulator/checkout/{id}': { arrange: () => at('/billing/simulator/checkout/matrix') },
  'POST /billing/simulator/checkout/{id}/complete': { arrange: () => at('/billing/simulator/checkout/matrix/complete') },
  'POST /billing/simulator/checkout/{id}/cancel': { arrange: () => at('/billing/simulator/checkout/matrix/cancel') },
  'GET /billing/simulator/portal/{id}': { arrange: () => at('/billing/simulator/portal/matrix') },
  'POST /billing/simulator/portal/{id}/{action}': { arrange: () => at('/billing/simulator/portal/matrix/cancel_now') },

  // Auth, sessions, MFA: the subject is never the caller, so self-only calls change nothing.
  'POST /v1/users/{id}/password': { arrange: (w) => at(`/v1/users/${S(w)}/password`, { current_password: PASSWORD, new_password: STRONG }) },
  'POST /v1/auth/logout': {
    // all_sessions false: the not-destructive form. A user caller logs out a fresh session of its own.
    arrange: async (w, c, _pick, reach) => ({ url: '/v1/auth/logout', body: {}, ...(reach && c.kind === 'user' ? { cred: (await sessionOf(w.t, { id: w.userOf[c.id] })).token } : {}) }),
  },
  'GET /v1/users/{id}/sessions': { arrange: (w) => at(`/v1/users/${S(w)}/sessions`) },
  'DELETE /v1/users/{id}/sessions/{sessionId}': {
    arrange: async (w, _c, pick) => at(`/v1/users/${S(w)}/sessions/${await pick(() => freshSession(w, S(w)), w.ghost.session)}`),
  },
  'POST /v1/users/{id}/mfa/totp': { arrange: (w) => at(`/v1/users/${S(w)}/mfa/totp`) },
  'POST /v1/users/{id}/mfa/totp/confirm': { arrange: (w) => at(`/v1/users/${S(w)}/mfa/totp/confirm`, { code: '123456' }) },
  'POST /v1/users/{id}/mfa/totp/disable': { arrange: (w) => at(`/v1/users/${S(w)}/mfa/totp/disable`, { code: '123456' }) },
  'DELETE /v1/users/{id}/mfa/totp': { arrange: async (w, _c, pick) => at(`/v1/users/${await pick(async () => (await freshUser(w)).id, w.ghost.user)}/mfa/totp`) },

  // Users
  'GET /v1/users': { arrange: (w) => at(`/v1/users?email=${encodeURIComponent(w.subject.email)}`), listed: (w) => [w.subject.id] },
  'POST /v1/users': { arrange: () => at('/v1/users', { email: nobody(), send_invitation: false }) },
  'GET /v1/users/{id}': { arrange: (w) => at(`/v1/users/${S(w)}`) },
  'PATCH /v1/users/{id}': { arrange: async (w, _c, pick) => at(`/v1/users/${await pick(async () => (await freshUser(w)).id, w.ghost.user)}`, { email: nobody() }) },
  'DELETE /v1/users/{id}': { arrange: async (w, _c, pick) => at(`/v1/users/${await pick(async () => (await freshUser(w)).id, w.ghost.user)}`) },
  'POST /v1/users/{id}/suspend': { arrange: async (w, _c, pick) => at(`/v1/users/${await pick(async () => (await freshUser(w)).id, w.ghost.user)}/suspend`, {}) },
  'POST /v1/users/{id}/invitation': {
    arrange: async (w, _c, pick) => at(`/v1/users/${await pick(async () => (await freshUser(w, { status: 'invited', accessA: false })).id, w.ghost.user)}/invitation`),
  },
  'GET /v1/users/{id}/export': { arrange: (w) => at(`/v1/users/${S(w)}/export`) },
  'POST /v1/users/{id}/erasure-requests': { arrange: async (w, _c, pick) => at(`/v1/users/${await pick(async () => (await freshUser(w)).id, w.ghost.user)}/erasure-requests`, {}) },
  'DELETE /v1/users/{id}/erasure-requests/current': {
    arrange: async (w, _c, pick) => at(`/v1/users/${await pick(() => freshErasureTarget(w), w.ghost.user)}/erasure-requests/current`),
  },

  // Profiles
  'GET /v1/users/{id}/profile': { arrange: (w) => at(`/v1/users/${S(w)}/profile`) },
  'PATCH /v1/users/{id}/profile': { arrange: (w) => at(`/v1/users/${S(w)}/profile`, { display_name: 'Matrix Subject' }) },
  'GET /v1/users/{id}/apps/{appId}/profile': { arrange: (w) => at(`/v1/users/${S(w)}/apps/${w.appA.id}/profile`) },
  'PATCH /v1/users/{id}/apps/{appId}/profile': { arrange: (w) => at(`/v1/users/${S(w)}/apps/${w.appA.id}/profile`, { display_handle: 'matrix' }) },
  'GET /v1/users/{id}/settings': { arrange: (w) => at(`/v1/users/${S(w)}/settings`) },
  'PATCH /v1/users/{id}/settings': { arrange: (w) => at(`/v1/users/${S(w)}/settings`, { theme: 'dark' }) },
  'GET /v1/users/{id}/apps/{appId}/settings': { arrange: (w) => at(`/v1/users/${S(w)}/apps/${w.appA.id}/settings`) },
  'PATCH /v1/users/{id}/apps/{appId}/settings': { arrange: (w) => at(`/v1/users/${S(w)}/apps/${w.appA.id}/settings`, { overrides: {} }) },

  // API keys (the target key is never a caller)
  'GET /v1/api-keys': { arrange: () => at('/v1/api-keys?scope=platform&limit=100'), listed: (w) => [w.targetKey] },
  'POST /v1/api-keys': { arrange: () => at('/v1/api-keys', { name: 'matrix', scope: 'platform', permissions: [] }) },
  'GET /v1/api-keys/{id}': { arrange: (w) => at(`/v1/api-keys/${w.targetKey}`) },
  'PATCH /v1/api-keys/{id}': { arrange: (w) => at(`/v1/api-keys/${w.targetKey}`, { name: 'matrix target' }) },
  'DELETE /v1/api-keys/{id}': { arrange: async (w, _c, pick) => at(`/v1/api-keys/${await pick(() => freshKey(w), w.ghost.key)}`) },
  'POST /v1/api-keys/{id}/rotate': { arrange: (w) => at(`/v1/api-keys/${w.targetKey}/rotate`) },

  // Applications
  'GET /v1/applications': { arrange: () => at('/v1/applications') },
  'POST /v1/applications': {
    // Starter allows one Application per owner: a fresh owner per call that may succeed.
    arrange: async (w, _c, pick) => {
      const slug = `mxn${rand(4)}`;
      const owner = await pick(async () => (await createUser(w.t)).id, w.ghost.user);
      return at('/v1/applications', { slug, name: 'Matrix new', launch_url: `https://${slug}.example.com/`, owner_user_id: owner });
    },
  },
  'GET /v1/applications/{id}': { arrange: (w) => at(`/v1/applications/${w.appA.id}`) },
  'PATCH /v1/applications/{id}': { arrange: (w) => at(`/v1/applications/${w.appA.id}`, { description: 'Matrix application A' }) },

  // Entitlements
  'GET /v1/users/{id}/entitlements': { arrange: (w) => at(`/v1/users/${S(w)}/entitlements`) },
  'POST /v1/users/{id}/entitlements': {
    arrange: async (w, _c, pick) =>
      at(`/v1/users/${await pick(async () => (await freshUser(w, { accessA: false })).id, w.ghost.user)}/entitlements`, { application_id: w.appA.id, source: 'admin_grant' }, idem()),
  },
  'GET /v1/entitlements': { arrange: (w) => at(`/v1/entitlements?user_id=${S(w)}`), listed: (w) => [w.subjectEntitlement] },
  'GET /v1/entitlements/{id}': { arrange: (w) => at(`/v1/entitlements/${w.subjectEntitlement}`) },
  'PATCH /v1/entitlements/{id}': {
    destructiveNow: false,
    arrange: async (w, _c, pick) => at(`/v1/entitlements/${await pick(async () => (await freshUser(w)).entitlementId!, w.ghost.entitlement)}`, { ends_at: future() }),
  },
  'DELETE /v1/entitlements/{id}': { arrange: async (w, _c, pick) => at(`/v1/entitlements/${await pick(async () => (await freshUser(w)).entitlementId!, w.ghost.entitlement)}`) },

  // Roles
  'GET /v1/permissions': { arrange: () => at('/v1/permissions') },
  'GET /v1/roles': { arrange: (w) => at(`/v1/roles?scope=${w.appA.id}`), listed: (w) => [w.appA.editorRole] },
  'POST /v1/roles': { arrange: () => at('/v1/roles', { name: `mx_${rand(4)}`, scope: 'platform', permissions: [] }) },
  'GET /v1/roles/{id}': { arrange: (w) => at(`/v1/roles/${w.appA.editorRole}`) },
  'PATCH /v1/roles/{id}': { arrange: (w) => at(`/v1/roles/${w.appA.editorRole}`, { description: 'Matrix editor' }) },
  'DELETE /v1/roles/{id}': { arrange: async (w, _c, pick) => at(`/v1/roles/${await pick(() => freshPlatformRole(w), w.ghost.role)}`) },
  'GET /v1/users/{id}/roles': { arrange: (w) => at(`/v1/users/${S(w)}/roles`) },
  'POST /v1/users/{id}/roles/{roleId}': {
    arrange: async (w, _c, pick) => at(`/v1/users/${await pick(async () => (await freshUser(w)).id, w.ghost.user)}/roles/${w.appA.editorRole}`, {}),
  },
  'DELETE /v1/users/{id}/roles/{roleId}': { arrange: async (w, _c, pick) => at(`/v1/users/${await pick(() => freshEditor(w), w.ghost.user)}/roles/${w.appA.editorRole}`) },
  'GET /v1/users/{id}/apps/{appId}/effective-permissions': { arrange: (w) => at(`/v1/users/${S(w)}/apps/${w.appA.id}/effective-permissions`) },
  'POST /v1/auth/app-tokens': { arrange: (w) => at('/v1/auth/app-tokens', { application_id: w.appA.id }) },
  'POST /v1/auth/oauth/authorization-codes': {
    arrange: (w) =>
      at('/v1/auth/oauth/authorization-codes', { application_id: w.appA.id, redirect_uri: `https://${w.appA.slug}.example.com/cb`, code_challenge: CHALLENGE, code_challenge_method: 'S256' }),
  },

  // Organizations
  'GET /v1/organizations': { arrange: () => at('/v1/organizations?limit=100'), listed: (w) => [w.org.id] },
  'POST /v1/organizations': { arrange: () => at('/v1/organizations', { name: 'Matrix caller org' }) },
  'GET /v1/organizations/{id}': { arrange: (w) => at(`/v1/organizations/${w.org.id}`) },
  'PATCH /v1/organizations/{id}': { arrange: (w) => at(`/v1/organizations/${w.org.id}`, { name: 'Matrix org' }) },
  'GET /v1/organizations/{id}/members': { arrange: (w) => at(`/v1/organizations/${w.org.id}/members`) },
  'POST /v1/organizations/{id}/members': { arrange: (w) => at(`/v1/organizations/${w.org.id}/members`, { email: nobody() }) },
  'POST /v1/organizations/{id}/members/me/accept': { arrange: (w) => at(`/v1/organizations/${w.org.id}/members/me/accept`, {}) },
  'PATCH /v1/organizations/{id}/members/{userId}': { arrange: (w) => at(`/v1/organizations/${w.org.id}/members/${w.org.memberId}`, { role: 'member' }) },
  'DELETE /v1/organizations/{id}/members/{userId}': {
    arrange: async (w, _c, pick) => at(`/v1/organizations/${w.org.id}/members/${await pick(() => freshOrgMember(w), w.ghost.user)}`),
  },
  'GET /v1/organizations/{id}/entitlements': { arrange: (w) => at(`/v1/organizations/${w.org.id}/entitlements`) },
  'POST /v1/organizations/{id}/entitlements': {
    arrange: async (w, _c, pick) => at(`/v1/organizations/${await pick(() => freshOrg(w), w.ghost.org)}/entitlements`, { application_id: w.appA.id }, idem()),
  },

  // Audit
  'GET /v1/audit-events': {
    arrange: (w) => at(`/v1/audit-events?application_id=${w.appA.id}&action=application.created`),
    listed: (w) => [w.auditEvent],
  },
  'GET /v1/audit-events/{id}': { arrange: (w) => at(`/v1/audit-events/${w.auditEvent}`) },

  // Webhooks
  'GET /v1/webhooks': { arrange: (w) => at(`/v1/webhooks?scope=${w.appA.id}&limit=100`), listed: (w) => [w.webhook.id] },
  'POST /v1/webhooks': { arrange: () => at('/v1/webhooks', { scope: 'platform', url: 'https://127.0.0.1:9/matrix', events: ['*'] }) },
  'GET /v1/webhooks/{id}': { arrange: (w) => at(`/v1/webhooks/${w.webhook.id}`) },
  'PATCH /v1/webhooks/{id}': { arrange: (w) => at(`/v1/webhooks/${w.webhook.id}`, { description: 'Matrix subscription' }) },
  'DELETE /v1/webhooks/{id}': { arrange: async (w, _c, pick) => at(`/v1/webhooks/${await pick(() => freshWebhook(w), w.ghost.webhook)}`) },
  'POST /v1/webhooks/{id}/rotate-secret': { arrange: (w) => at(`/v1/webhooks/${w.webhook.id}/rotate-secret`, {}) },
  'POST /v1/webhooks/{id}/test': { arrange: (w) => at(`/v1/webhooks/${w.webhook.id}/test`, {}) },
  'GET /v1/webhooks/{id}/deliveries': { arrange: (w) => at(`/v1/webhooks/${w.webhook.id}/deliveries`) },
  'POST /v1/webhooks/{id}/deliveries/{deliveryId}/redeliver': { arrange: (w) => at(`/v1/webhooks/${w.webhook.id}/deliveries/${w.webhook.deliveryId}/redeliver`, {}) },

  // Tenancy and billing
  'GET /v1/tenants': { arrange: (w) => at(`/v1/tenants?owner_user_id=${w.appA.ownerId}`), listed: (w) => [w.appA.tenantId] },
  'GET /v1/tenants/{id}': { arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}`) },
  'POST /v1/tenants/{id}/tier-change-requests': {
    arrange: async (w, _c, pick) => at(`/v1/tenants/${await pick(() => freshTenant(w), w.ghost.tenant)}/tier-change-requests`, { requested_tier: 'isolated', reason: 'matrix' }),
  },
  'GET /v1/tenants/{id}/tier-change-requests': { arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}/tier-change-requests`) },
  'GET /v1/tenants/{id}/tier-change-requests/{requestId}': { arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}/tier-change-requests/${w.tierRequest}`) },
  'PATCH /v1/tenants/{id}/tier-change-requests/{requestId}': { arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}/tier-change-requests/${w.tierRequest}`, { notes: 'matrix' }) },
  'GET /v1/tenants/{id}/subscription': { arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}/subscription`) },
  'GET /v1/tenants/{id}/usage': { arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}/usage`) },
  'POST /v1/tenants/{id}/billing/checkout-sessions': {
    arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}/billing/checkout-sessions`, { plan: 'team', success_url: 'https://a.example.com/ok', cancel_url: 'https://a.example.com/no' }, idem()),
  },
  'POST /v1/tenants/{id}/billing/portal-sessions': { arrange: (w) => at(`/v1/tenants/${w.appA.tenantId}/billing/portal-sessions`, { return_url: 'https://a.example.com/back' }) },
};
