// AZ-6 (security-test-catalog.md §2.5): the destructive classification of Part A convention 11 and
// the requests the restrict_destructive check makes for each operation the document marks
// x-platform-destructive. Each variant gets a fresh target, so the unrestricted twin key can repeat
// the very request after the restricted key was refused.
import assert from 'node:assert/strict';
import { call } from '../../helpers/http.js';
import type { Req } from './operations.js';
import {
  freshAppWithRoles, freshEditor, freshErasureTarget, freshKey, freshOrgMember, freshPlatformRole, freshSession, freshTenant, freshUser, freshWebhook, type World,
} from './world.js';

/** Part A convention 11: the operations classified destructive, as the spec names them. */
export function specClass(key: string): 'always' | 'conditional' | undefined {
  const [method, path] = key.split(' ');
  if (method === 'DELETE') return 'always'; // every DELETE, including role deletion and role assignment removal
  if (method === 'POST' && /^\/v1\/users\/\{id\}\/suspend$/.test(path)) return 'always';
  if (method === 'POST' && /^\/v1\/users\/\{id\}\/erasure-requests$/.test(path)) return 'always';
  if (method === 'POST' && /^\/v1\/tenants\/\{id\}\/tier-change-requests$/.test(path)) return 'always';
  if (key === 'PATCH /v1/entitlements/{id}' || key === 'POST /v1/auth/logout') return 'conditional';
  if (key === 'PATCH /v1/users/{id}') return 'conditional'; // status suspended: a user suspend
  if (key === 'PATCH /v1/applications/{id}') return 'conditional'; // a name dropped from available_app_roles: a role deletion
  return undefined;
}

export interface Variant {
  label: string;
  /** The request meets the operation's condition (always true for `always` operations). */
  destructive: boolean;
  arrange: (w: World) => Promise<Req>;
  /**
   * What the unrestricted twin key gets for the same request (and the restricted key when the
   * condition does not hold); for a User-token operation, what a user gets.
   */
  ok: number;
  /** A User token is needed: every key gets 400 user_token_required before the destructive gate. */
  userOnly?: true;
}

const at = (url: string, body?: unknown): Req => ({ url, body });
const reason = { disabled_reason: 'AZ-6' };

export const CASES: Record<string, Variant[]> = {
  'DELETE /v1/users/{id}': [{ label: 'soft delete', destructive: true, ok: 204, arrange: async (w) => at(`/v1/users/${(await freshUser(w)).id}`) }],
  'POST /v1/users/{id}/suspend': [{ label: 'suspend', destructive: true, ok: 200, arrange: async (w) => at(`/v1/users/${(await freshUser(w)).id}/suspend`, {}) }],
  'POST /v1/users/{id}/erasure-requests': [
    { label: 'erasure request', destructive: true, ok: 202, arrange: async (w) => at(`/v1/users/${(await freshUser(w)).id}/erasure-requests`, {}) },
  ],
  'DELETE /v1/users/{id}/erasure-requests/current': [
    { label: 'cancel erasure', destructive: true, ok: 204, arrange: async (w) => at(`/v1/users/${await freshErasureTarget(w)}/erasure-requests/current`) },
  ],
  'DELETE /v1/users/{id}/sessions/{sessionId}': [
    { label: 'revoke a session', destructive: true, ok: 204, arrange: async (w) => at(`/v1/users/${w.subject.id}/sessions/${await freshSession(w, w.subject.id)}`) },
  ],
  'DELETE /v1/users/{id}/mfa/totp': [{ label: 'support MFA reset', destructive: true, ok: 204, arrange: async (w) => at(`/v1/users/${(await freshUser(w)).id}/mfa/totp`) }],
  'DELETE /v1/api-keys/{id}': [
    { label: 'revoke a key', destructive: true, ok: 204, userOnly: true, arrange: async (w) => at(`/v1/api-keys/${await freshKey(w)}`) },
  ],
  'DELETE /v1/entitlements/{id}': [{ label: 'hard delete', destructive: true, ok: 204, arrange: async (w) => at(`/v1/entitlements/${(await freshUser(w)).entitlementId}`) }],
  'DELETE /v1/roles/{id}': [{ label: 'role deletion', destructive: true, ok: 204, arrange: async (w) => at(`/v1/roles/${await freshPlatformRole(w)}`) }],
  'DELETE /v1/users/{id}/roles/{roleId}': [
    { label: 'role assignment removal', destructive: true, ok: 204, arrange: async (w) => at(`/v1/users/${await freshEditor(w)}/roles/${w.appA.editorRole}`) },
  ],
  'DELETE /v1/organizations/{id}/members/{userId}': [
    { label: 'member removal', destructive: true, ok: 204, arrange: async (w) => at(`/v1/organizations/${w.org.id}/members/${await freshOrgMember(w)}`) },
  ],
  'DELETE /v1/webhooks/{id}': [{ label: 'subscription deletion', destructive: true, ok: 204, arrange: async (w) => at(`/v1/webhooks/${await freshWebhook(w)}`) }],
  'POST /v1/tenants/{id}/tier-change-requests': [
    { label: 'tier-change request', destructive: true, ok: 201, arrange: async (w) => at(`/v1/tenants/${await freshTenant(w)}/tier-change-requests`, { requested_tier: 'isolated', reason: 'AZ-6' }) },
  ],
  'PATCH /v1/entitlements/{id}': [
    { label: 'status disabled', destructive: true, ok: 200, arrange: async (w) => at(`/v1/entitlements/${(await freshUser(w)).entitlementId}`, { status: 'disabled', ...reason }) },
    { label: 'status revoked', destructive: true, ok: 200, arrange: async (w) => at(`/v1/entitlements/${(await freshUser(w)).entitlementId}`, { status: 'revoked', ...reason }) },
    {
      label: 'status revoked from disabled',
      destructive: true,
      ok: 200,
      arrange: async (w) => at(`/v1/entitlements/${await disabledEntitlement(w)}`, { status: 'revoked', ...reason }),
    },
    {
      label: 'ends_at set to now (access ends at once, as on a revocation)',
      destructive: true,
      ok: 200,
      arrange: async (w) => {
        const id = (await freshUser(w)).entitlementId!;
        return at(`/v1/entitlements/${id}`, { ends_at: w.t.clock.now().toISOString() });
      },
    },
    { label: 'ends_at only', destructive: false, ok: 200, arrange: async (w) => at(`/v1/entitlements/${(await freshUser(w)).entitlementId}`, { ends_at: inDays(200) }) },
    { label: 're-enable (disabled → active)', destructive: false, ok: 200, arrange: async (w) => at(`/v1/entitlements/${await disabledEntitlement(w)}`, { status: 'active' }) },
    { label: 'status expired (not a move anyone may make)', destructive: false, ok: 409, arrange: async (w) => at(`/v1/entitlements/${(await freshUser(w)).entitlementId}`, { status: 'expired' }) },
  ],
  'PATCH /v1/users/{id}': [
    { label: 'status suspended', destructive: true, ok: 200, arrange: async (w) => at(`/v1/users/${(await freshUser(w)).id}`, { status: 'suspended' }) },
    { label: 'email only', destructive: false, ok: 200, arrange: async (w) => at(`/v1/users/${(await freshUser(w)).id}`, { email: `az6-${Math.random().toString(36).slice(2, 10)}@example.com` }) },
  ],
  'PATCH /v1/applications/{id}': [
    { label: 'a name dropped with its unassigned Role', destructive: true, ok: 200, arrange: async (w) => at(`/v1/applications/${await freshAppWithRoles(w)}`, { available_app_roles: ['viewer'] }) },
    { label: 'a name added', destructive: false, ok: 200, arrange: async (w) => at(`/v1/applications/${await freshAppWithRoles(w)}`, { available_app_roles: ['viewer', 'editor', 'admin'] }) },
  ],
  'POST /v1/auth/logout': [
    { label: 'all_sessions true', destructive: true, ok: 204, userOnly: true, arrange: async () => at('/v1/auth/logout', { all_sessions: true }) },
    { label: 'all_sessions false', destructive: false, ok: 204, userOnly: true, arrange: async () => at('/v1/auth/logout', { all_sessions: false }) },
  ],
};

const inDays = (d: number) => new Date(Date.now() + d * 86400_000).toISOString();

async function disabledEntitlement(w: World): Promise<string> {
  const id = (await freshUser(w)).entitlementId!;
  const res = await call(w.t, 'PATCH', `/v1/entitlements/${id}`, w.admin, { status: 'disabled', ...reason });
  assert.equal(res.statusCode, 200, res.body);
  return id;
}
