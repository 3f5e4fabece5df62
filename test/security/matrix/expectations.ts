// AZ-1 (security-test-catalog.md §2.5): the ONE expectations table of the authorization matrix.
//
// How a cell's expected answer is found, first match wins:
//   1. The OpenAPI operation has no security requirement        → `public` below, for every caller.
//   2. anonymous, suspended user, deleted user                   → 401 unauthenticated.
//   3. `user: true` (a User token is needed) and the caller is a key → 400 user_token_required.
//   4. restrictKey and the document marks the operation x-platform-destructive `always` (or
//      `conditional` and the cell's request meets the condition) → 403 destructive_operation_restricted.
//   5. The document names x-platform-permission P and the caller's credential lacks P
//                                                                → 403 forbidden (the gate).
//   6. `except[caller]`                                          → that outcome, for the reason given.
//   7. testKey and `live` is set (the target is a live row)      → 404 `live` (test/live isolation).
//   8. the caller matches `allow`                                → `ok`: the operation ran.
//   9. any other signed-in caller                                → `deny`.
// Steps 1, 4 and 5 are read from GET /v1/openapi.json; the rest is written here with the spec's words
// (derive.ts applies the steps).
// "Allowed" (step 8) means the gate and the service let the call through: the cell asserts that exact
// success status (every allowed cell reaches one cheaply), and on lists also which fixture rows show.
//
// `allow` entries: a platform permission matches the users holding it and the platform keys
// (platformKey, testKey, restrictKey hold all twelve); `user` matches every signed-in user caller;
// `key` every key; caller ids match themselves. App-confined permissions never match a permission
// entry: app-scoped keys are listed by id (`ownAppKey`, `otherAppKey`).
//
// The fixtures (world.ts): Application A (public, approved, Enterprise tenant TA, owned by a user who is
// not a caller) with its own key `ownAppKey`; Application B with `otherAppKey`; a live `subject` user with
// an active personal Entitlement to A; Organization O (an org_admin and a member, neither a caller) with an
// org grant to A; an app Role `editor` of A; webhook subscription W scoped to A with one delivery; a
// tier-change request on TA; audit events about A. No caller is the subject, an owner or an org member.
import type { PlatformPermission } from '../../../src/http/meta.js';
import type { CallerId } from './callers.js';

export interface Outcome {
  status: number;
  /** error.code of the envelope (or `error` of the OAuth shape); absent for successes. */
  code?: string;
}
export type Grant = PlatformPermission | 'user' | 'key' | 'ownAppKey' | 'otherAppKey';

export interface Rule {
  /** Where the spec (or docs/decisions.md) says so. */
  why: string;
  /** Unauthenticated operations: what every caller gets (the credential is ignored). */
  public?: Outcome;
  /** Needs a User token: keys get 400 user_token_required. */
  user?: true;
  /** Status of a call that is let through. */
  ok?: number;
  allow?: Grant[];
  /** Other signed-in callers. */
  deny?: Outcome;
  /** The target is a live row: a test credential gets 404 with this code. */
  live?: string;
  except?: Record<CallerId, [Outcome, string]>;
  /**
   * The service, not the gate, refuses a restrict_destructive key (after refusals that hold for every
   * caller): the restricted key's call reaches a real target and must still get 403.
   */
  destructiveInService?: true;
  /**
   * List operations: the allowed callers who see the fixture rows the call looks for (operations.ts
   * `listed`); every other allowed caller must get a page without them. A test credential sees no
   * live row unless the resource has no mode (`modeless`).
   */
  sees?: Grant[];
  modeless?: true;
  /**
   * The `deny` refusal is function-level (no right over the Application, whatever the target): the
   * same call on a ghost target must get the same answer, or the 403 tells which ids exist.
   */
  blind?: true;
}

export const nf = (code: string): Outcome => ({ status: 404, code });
const err = (status: number, code: string): Outcome => ({ status, code });
export const FORBIDDEN = err(403, 'forbidden');
const ENTITLEMENT_REQUIRED = err(403, 'entitlement_required');
export const UNAUTHENTICATED = err(401, 'unauthenticated');
export const USER_TOKEN_REQUIRED = err(400, 'user_token_required');
export const RESTRICTED = err(403, 'destructive_operation_restricted');

/** Readers of a user (Part A Users; decisions "403 or 404"). users.manage reads whatever it may change. */
const USER_READERS: Grant[] = ['users.list', 'users.manage'];
const SHARED_CATALOG = 'Applications are shared catalog rows visible to both modes (Part A convention 10)';

export const RULES: Record<string, Rule> = {
  // ---- outside /v1 and unauthenticated (Part A Authentication 1; operations.md Outside interfaces) ----
  'GET /health': { why: 'operations.md: no credential', public: { status: 200 } },
  'GET /.well-known/jwks.json': { why: 'Part A Auth table: none', public: { status: 200 } },
  'GET /.well-known/openid-configuration': { why: 'Part A Auth table: none', public: { status: 200 } },
  'GET /.well-known/oauth-authorization-server': { why: 'RFC 8414 metadata of the same server as the discovery document (decisions.md, OAuth): none', public: { status: 200 } },
  'GET /v1/openapi.json': { why: 'operations.md Outside interfaces', public: { status: 200 } },
  'POST /v1/auth/signup': { why: 'Part A Auth: none; an email held by an active user → 409 email_taken', public: err(409, 'email_taken') },
  'POST /v1/auth/login': { why: 'Part A Auth: none; unknown email → 401 invalid_credentials (not the gate 401)', public: err(401, 'invalid_credentials') },
  'POST /v1/auth/mfa/verify': { why: 'Part A Auth: none (mfa_token); decisions: bad MFA token → 401 invalid_credentials', public: err(401, 'invalid_credentials') },
  'POST /v1/auth/token/refresh': { why: 'Part A Auth: none (refresh token); decisions: 401 invalid_refresh_token', public: err(401, 'invalid_refresh_token') },
  'POST /v1/auth/email/verify': { why: 'Part A Auth: none (token); bad token 400', public: err(400, 'invalid_token') },
  'POST /v1/auth/email/verify/resend': { why: 'Part A Auth: none; always 202', public: { status: 202 } },
  'POST /v1/auth/password/forgot': { why: 'Part A Auth: none; always 202', public: { status: 202 } },
  'POST /v1/auth/password/reset': { why: 'Part A Auth: none (token); decisions: bad token 400 invalid_token', public: err(400, 'invalid_token') },
  'POST /v1/auth/invitations/accept': { why: 'Part A Auth: none (token); decisions: bad token 400 invalid_token', public: err(400, 'invalid_token') },
  'POST /v1/auth/sso/{provider}/callback': { why: 'Part A Auth: none; 501 not_implemented', public: err(501, 'not_implemented') },
  'POST /v1/auth/oauth/token': { why: 'Part A Auth: none; OAuth errors 400 {error}; an unknown code is invalid_grant', public: err(400, 'invalid_grant') },
  'POST /v1/billing/processor-events': { why: 'operations.md: signed by the processor, no credential; missing signature → 400', public: err(400, 'invalid_signature') },
  'GET /billing/simulator/checkout/{id}': { why: 'decisions Simulator: unguessable ids, no credential; unknown id → 404 page', public: { status: 404 } },
  'POST /billing/simulator/checkout/{id}/complete': { why: 'decisions Simulator', public: { status: 404 } },
  'POST /billing/simulator/checkout/{id}/cancel': { why: 'decisions Simulator', public: { status: 404 } },
  'GET /billing/simulator/portal/{id}': { why: 'decisions Simulator', public: { status: 404 } },
  'POST /billing/simulator/portal/{id}/{action}': { why: 'decisions Simulator', public: { status: 404 } },

  // ---- Auth, sessions and MFA (Part A Auth table; the target is the subject, never the caller) ----
  'POST /v1/users/{id}/password': {
    why: 'Part A: self only; decisions "403 or 404": a caller who can read the user but not change it gets 403, others 404',
    user: true, ok: 204, allow: [], deny: nf('user_not_found'),
    except: { 'perm:users.list': [FORBIDDEN, 'can read the subject, cannot change its password'], 'perm:users.manage': [FORBIDDEN, 'can read the subject; password change is self only'] },
  },
  'POST /v1/auth/logout': { why: 'Part A Auth: user; each user caller ends its own (fresh) session', user: true, ok: 204, allow: ['user'] },
  'GET /v1/users/{id}/sessions': {
    why: 'Part A: self or users.manage; decisions: readers who cannot act get 403, others 404',
    ok: 200, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, cannot list its sessions'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, cannot list its sessions'] },
  },
  'DELETE /v1/users/{id}/sessions/{sessionId}': {
    why: 'Part A: self or users.manage; decisions: readers who cannot act get 403, others 404',
    ok: 204, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, cannot revoke its sessions'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, cannot revoke its sessions'] },
  },
  'POST /v1/users/{id}/mfa/totp': {
    why: 'Part A: self only (enrollment); decisions "403 or 404"',
    user: true, ok: 200, allow: [], deny: nf('user_not_found'),
    except: { 'perm:users.list': [FORBIDDEN, 'can read the subject, cannot change it'], 'perm:users.manage': [FORBIDDEN, 'can read the subject; enrollment is self only'] },
  },
  'POST /v1/users/{id}/mfa/totp/confirm': {
    why: 'Part A: self only; decisions "403 or 404"',
    user: true, ok: 200, allow: [], deny: nf('user_not_found'),
    except: { 'perm:users.list': [FORBIDDEN, 'can read the subject, cannot change it'], 'perm:users.manage': [FORBIDDEN, 'can read the subject; confirmation is self only'] },
  },
  'POST /v1/users/{id}/mfa/totp/disable': {
    why: 'Part A: self only (support uses DELETE); decisions "403 or 404"',
    user: true, ok: 204, allow: [], deny: nf('user_not_found'),
    except: { 'perm:users.list': [FORBIDDEN, 'can read the subject, cannot change it'], 'perm:users.manage': [FORBIDDEN, 'can read the subject; disable is self only'] },
  },
  'DELETE /v1/users/{id}/mfa/totp': { why: 'Part A: users.manage (support reset)', ok: 204, allow: ['users.manage'], live: 'user_not_found' },

  // ---- Users (Part A Users table; decisions "403 or 404") ----
  'GET /v1/users': {
    why: 'Part A: users.list or app-confined users.list; users.manage may list (it alone may filter deleted)',
    ok: 200, allow: [...USER_READERS, 'ownAppKey', 'otherAppKey'], deny: FORBIDDEN,
    sees: [...USER_READERS, 'ownAppKey'],
  },
  'POST /v1/users': { why: 'Part A: users.manage; a test key creates a test user', ok: 201, allow: ['users.manage'] },
  'GET /v1/users/{id}': {
    why: 'Part A: self, users.list, app-confined users.list (users with an access path); others 404',
    ok: 200, allow: [...USER_READERS, 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
  },
  'PATCH /v1/users/{id}': {
    why: 'Part A: self (email) or users.manage; decisions: readers who cannot change get 403',
    ok: 200, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, cannot change it'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, cannot change it'] },
  },
  'DELETE /v1/users/{id}': {
    why: 'Part A: self or users.manage; decisions: readers who cannot change get 403',
    ok: 204, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, cannot delete it'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, cannot delete it'] },
  },
  'POST /v1/users/{id}/suspend': { why: 'Part A: users.manage', ok: 200, allow: ['users.manage'], live: 'user_not_found' },
  'POST /v1/users/{id}/invitation': { why: 'Part A: users.manage (target is an invited user)', ok: 202, allow: ['users.manage'], live: 'user_not_found' },
  'GET /v1/users/{id}/export': {
    why: 'Part A: self or users.manage; decisions: readers who cannot act get 403, others 404',
    ok: 200, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, cannot export it'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, cannot export it'] },
  },
  'POST /v1/users/{id}/erasure-requests': {
    why: 'Part A: self or users.manage; decisions: readers who cannot act get 403, others 404',
    ok: 202, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, cannot erase it'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, cannot erase it'] },
  },
  'DELETE /v1/users/{id}/erasure-requests/current': { why: 'Part A: users.manage', ok: 204, allow: ['users.manage'], live: 'user_not_found' },

  // ---- Profiles (Part A Profiles) ----
  'GET /v1/users/{id}/profile': {
    why: 'Part A: self, users.list, app-confined users.list; others 404',
    ok: 200, allow: [...USER_READERS, 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
  },
  'PATCH /v1/users/{id}/profile': {
    why: 'Part A: self or users.manage; an app key with users.list "can read, never write"; readers who cannot write get 403',
    ok: 200, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the Profile, cannot write it'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads, never writes, the global Profile'] },
  },
  'GET /v1/users/{id}/apps/{appId}/profile': {
    why: "Part A Profiles: self, the app's own key, users.manage; another Application's key gets 404",
    ok: 200, allow: ['users.manage', 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
    except: {
      'perm:users.list': [FORBIDDEN, 'reads the user, not its per-Application data (decisions: 403 or 404)'],
      otherAppKey: [nf('application_not_found'), 'an app-scoped key "cannot reach another Application (404)"'] },
  },
  'PATCH /v1/users/{id}/apps/{appId}/profile': {
    why: "Part A Profiles: self, the app's own key, users.manage",
    ok: 200, allow: ['users.manage', 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
    except: {
      'perm:users.list': [FORBIDDEN, 'reads the user, not its per-Application data (decisions: 403 or 404)'],
      otherAppKey: [nf('application_not_found'), 'an app-scoped key "cannot reach another Application (404)"'] },
  },

  // ---- Settings (Part A: "not shown"; docs/decisions.md "Settings") ----
  'GET /v1/users/{id}/settings': {
    why: 'decisions: self or users.manage; readers of the user who cannot read its preferences get 403',
    ok: 200, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, not its Settings'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, not its Settings'] },
  },
  'PATCH /v1/users/{id}/settings': {
    why: 'decisions: self or users.manage; readers who cannot write get 403',
    ok: 200, allow: ['users.manage'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { 'perm:users.list': [FORBIDDEN, 'reads the user, cannot write its Settings'], ownAppKey: [FORBIDDEN, 'app-confined users.list reads the user, cannot write its Settings'] },
  },
  'GET /v1/users/{id}/apps/{appId}/settings': {
    why: "decisions: the AppProfile's callers (self, the app's own key, users.manage); another Application's key gets 404",
    ok: 200, allow: ['users.manage', 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
    except: {
      'perm:users.list': [FORBIDDEN, 'reads the user, not its per-Application data (decisions: 403 or 404)'],
      otherAppKey: [nf('application_not_found'), 'an app-scoped key "cannot reach another Application (404)"'] },
  },
  'PATCH /v1/users/{id}/apps/{appId}/settings': {
    why: "decisions: the AppProfile's callers (self, the app's own key, users.manage)",
    ok: 200, allow: ['users.manage', 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
    except: {
      'perm:users.list': [FORBIDDEN, 'reads the user, not its per-Application data (decisions: 403 or 404)'],
      otherAppKey: [nf('application_not_found'), 'an app-scoped key "cannot reach another Application (404)"'] },
  },

  // ---- API keys (Part A API Keys; a key never manages keys) ----
  'GET /v1/api-keys': { why: 'Part A: keys in scope for the caller (every user; platform keys only for api_keys.manage)', user: true, ok: 200, allow: ['user'], sees: ['api_keys.manage'] },
  'POST /v1/api-keys': { why: 'Part A: a platform key is created by api_keys.manage only', user: true, ok: 201, allow: ['api_keys.manage'], deny: FORBIDDEN },
  'GET /v1/api-keys/{id}': { why: 'Part A: platform keys are api_keys.manage only; decisions: others 404 api_key_not_found', user: true, ok: 200, allow: ['api_keys.manage'], deny: nf('api_key_not_found') },
  'PATCH /v1/api-keys/{id}': { why: 'Part A: platform keys are api_keys.manage only', user: true, ok: 200, allow: ['api_keys.manage'], deny: nf('api_key_not_found') },
  'DELETE /v1/api-keys/{id}': { why: 'Part A: platform keys are api_keys.manage only', user: true, ok: 204, allow: ['api_keys.manage'], deny: nf('api_key_not_found') },
  'POST /v1/api-keys/{id}/rotate': {
    why: 'Part A: platform keys are api_keys.manage only; decisions: rotating needs every permission on the key (the target holds users.list)',
    user: true, ok: 200, allow: ['api_keys.manage'], deny: nf('api_key_not_found'),
    except: { 'perm:api_keys.manage': [err(403, 'role_escalation_forbidden'), "lacks users.list, the key's permission: the new secret would hand it over"] },
  },

  // ---- Applications (Part B Applications) ----
  'GET /v1/applications': { why: 'Part B: any authenticated caller (trimmed list)', ok: 200, allow: ['user', 'key'] },
  'POST /v1/applications': {
    why: 'Part B: applications.manage',
    ok: 201, allow: ['applications.manage'],
    except: { testKey: [err(422, 'validation_failed'), 'the owner is a live user, unknown to a test credential'] },
  },
  'GET /v1/applications/{id}': {
    why: `Part B: public approved Applications are visible to every authenticated caller; ${SHARED_CATALOG}`,
    ok: 200, allow: ['user', 'key'],
    except: { otherAppKey: [nf('application_not_found'), 'Part A Authentication 4: an app-confined key acts only on its own Application, other applications\' rows return 404 (application_not_found: "not the calling key\'s Application")'] },
  },
  'PATCH /v1/applications/{id}': {
    why: 'Part B: owner or applications.manage; a caller who sees it but may not change it gets 403',
    ok: 200, allow: ['applications.manage'], deny: FORBIDDEN,
    except: { otherAppKey: [nf('application_not_found'), 'Part A Authentication 4: another Application\'s key does not see A'] },
  },

  // ---- Entitlements (Part B Entitlements) ----
  'GET /v1/users/{id}/entitlements': {
    why: 'Part B: "self, entitlements.manage, app-confined entitlements.manage or users.list" (users.list only app-confined); users.manage also reads them (the export it may take carries every entitlement)',
    ok: 200, allow: ['entitlements.manage', 'users.manage', 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
  },
  'POST /v1/users/{id}/entitlements': {
    why: 'Part B: entitlements.manage (platform or app-confined) or the owner; an app key acts only on its own Application; no right over A → 403 whatever the user',
    ok: 201, allow: ['entitlements.manage', 'ownAppKey'], deny: FORBIDDEN, live: 'user_not_found', blind: true,
    except: { otherAppKey: [nf('application_not_found'), "Part A: application_not_found is also 'not the calling key's Application'"] },
  },
  'GET /v1/entitlements': {
    why: 'Part B: same callers as the grant (entitlements.manage, app-confined, or owner): an owner lists the rows of the Applications they own, a user who owns none (every user caller here) gets 403; app keys see their own rows',
    ok: 200, allow: ['entitlements.manage', 'ownAppKey', 'otherAppKey'], deny: FORBIDDEN,
    sees: ['entitlements.manage', 'ownAppKey'],
  },
  'GET /v1/entitlements/{id}': {
    why: 'Part B: self, holding-org member, entitlements.manage, owner, org admin; others (and other apps) 404',
    ok: 200, allow: ['entitlements.manage', 'ownAppKey'], deny: nf('entitlement_not_found'), live: 'entitlement_not_found',
  },
  'PATCH /v1/entitlements/{id}': {
    why: 'Part B: entitlements.manage or owner; readers of nothing get 404 (ends_at-only PATCH: not destructive)',
    ok: 200, allow: ['entitlements.manage', 'ownAppKey'], deny: nf('entitlement_not_found'), live: 'entitlement_not_found',
  },
  'DELETE /v1/entitlements/{id}': {
    why: 'Part B: entitlements.manage (platform or app-confined); other apps 404; order-linked 409 regardless of restrict_destructive',
    ok: 204, allow: ['entitlements.manage', 'ownAppKey'], deny: nf('entitlement_not_found'), live: 'entitlement_not_found', destructiveInService: true,
  },

  // ---- Roles and permissions (Part B Roles) ----
  'GET /v1/permissions': { why: 'Part B: any authenticated', ok: 200, allow: ['user', 'key'] },
  'GET /v1/roles': {
    why: "Part B: any authenticated (filtered): an Application's Roles only to its owner, own key, roles.manage; Roles have no mode",
    ok: 200, allow: ['user', 'key'], sees: ['roles.manage', 'ownAppKey'], modeless: true,
  },
  'POST /v1/roles': {
    why: 'Part B: a platform Role needs platform roles.manage (app keys manage only their own app Roles)',
    ok: 201, allow: ['roles.manage'], deny: FORBIDDEN,
  },
  'GET /v1/roles/{id}': {
    why: "Part B: an Application's Roles are visible to its owner, own key and roles.manage; others 404 (target: A's app Role)",
    ok: 200, allow: ['roles.manage', 'ownAppKey'], deny: nf('role_not_found'),
  },
  'PATCH /v1/roles/{id}': {
    why: "Part B: app Role: owner, own key with roles.manage, or roles.manage (target: A's app Role)",
    ok: 200, allow: ['roles.manage', 'ownAppKey'], deny: nf('role_not_found'),
  },
  'DELETE /v1/roles/{id}': {
    why: 'Part B: platform Role (fresh, unassigned): roles.manage; platform Roles are visible to holders of any platform permission, so those get 403, others 404',
    ok: 204, allow: ['roles.manage'], deny: FORBIDDEN,
    except: {
      member: [nf('role_not_found'), 'holds no platform permission: platform Roles are invisible'],
      ownAppKey: [nf('role_not_found'), 'an app key sees platform permissions keys, not platform Roles (visible to users with a platform permission)'],
      otherAppKey: [nf('role_not_found'), 'an app key sees platform permissions keys, not platform Roles (visible to users with a platform permission)'],
    },
  },
  'GET /v1/users/{id}/roles': {
    why: 'Part B: self, roles.manage, users.list, app-confined; users.manage reads them too (its export carries them)',
    ok: 200, allow: ['roles.manage', 'users.list', 'users.manage', 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
  },
  'POST /v1/users/{id}/roles/{roleId}': {
    why: "Part B Assignment rights: app Role: platform roles.manage, owner, or the Application's own key with roles.manage; anyone else is refused the function, 403 forbidden whoever the user is (catalog AZ-7; test/access/roles-assignments.test.ts pins the 403)",
    ok: 201, allow: ['roles.manage', 'ownAppKey'], deny: FORBIDDEN, live: 'user_not_found', blind: true,
    except: { otherAppKey: [err(403, 'role_scope_mismatch'), 'Part B: "another Application\'s Role: 403 role_scope_mismatch"'] },
  },
  'DELETE /v1/users/{id}/roles/{roleId}': {
    why: 'Part B: same rights as assignment',
    ok: 204, allow: ['roles.manage', 'ownAppKey'], deny: FORBIDDEN, live: 'user_not_found', blind: true,
    except: { otherAppKey: [err(403, 'role_scope_mismatch'), 'Part B: "another Application\'s Role: 403 role_scope_mismatch"'] },
  },
  'GET /v1/users/{id}/apps/{appId}/effective-permissions': {
    why: "Part B: self, the app's own key, users.list, entitlements.manage",
    ok: 200, allow: ['users.list', 'entitlements.manage', 'ownAppKey'], deny: nf('user_not_found'), live: 'user_not_found',
    except: { otherAppKey: [nf('application_not_found'), 'not the calling key\'s Application'] },
  },
  'POST /v1/auth/app-tokens': {
    why: 'Part A rule 7: User token; no caller has access to A → 403 entitlement_required',
    user: true, ok: 200, allow: [], deny: ENTITLEMENT_REQUIRED,
  },
  'POST /v1/auth/oauth/authorization-codes': {
    why: 'Part A rule 8: User token (hosted page); no caller has access to A → 403 entitlement_required',
    user: true, ok: 201, allow: [], deny: ENTITLEMENT_REQUIRED,
  },

  // ---- Organizations (Part B Organizations) ----
  'GET /v1/organizations': {
    why: 'Part B: any user (own) or organizations.manage (all); a key is neither',
    ok: 200, allow: ['user', 'organizations.manage'], deny: FORBIDDEN, sees: ['organizations.manage'],
  },
  'POST /v1/organizations': { why: 'Part B: any active user, User token', user: true, ok: 201, allow: ['user'] },
  'GET /v1/organizations/{id}': {
    why: 'Part B: active member or organizations.manage; others 404',
    ok: 200, allow: ['organizations.manage'], deny: nf('organization_not_found'), live: 'organization_not_found',
  },
  'PATCH /v1/organizations/{id}': {
    why: 'Part B: org admin (name) or organizations.manage',
    ok: 200, allow: ['organizations.manage'], deny: nf('organization_not_found'), live: 'organization_not_found',
  },
  'GET /v1/organizations/{id}/members': {
    why: 'Part B: active member or organizations.manage',
    ok: 200, allow: ['organizations.manage'], deny: nf('organization_not_found'), live: 'organization_not_found',
  },
  'POST /v1/organizations/{id}/members': {
    why: 'Part B: org admin or organizations.manage',
    ok: 201, allow: ['organizations.manage'], deny: nf('organization_not_found'), live: 'organization_not_found',
  },
  'POST /v1/organizations/{id}/members/me/accept': {
    why: 'Part B: the invited User; no caller has a pending membership → 404 member_not_found',
    user: true, ok: 200, allow: [], deny: nf('member_not_found'),
  },
  'PATCH /v1/organizations/{id}/members/{userId}': {
    why: 'Part B: org admin or organizations.manage',
    ok: 200, allow: ['organizations.manage'], deny: nf('organization_not_found'), live: 'organization_not_found',
  },
  'DELETE /v1/organizations/{id}/members/{userId}': {
    why: 'Part B: org admin, organizations.manage, or the member',
    ok: 204, allow: ['organizations.manage'], deny: nf('organization_not_found'), live: 'organization_not_found',
  },
  'GET /v1/organizations/{id}/entitlements': {
    why: 'Part B: active member or organizations.manage',
    ok: 200, allow: ['organizations.manage'], deny: nf('organization_not_found'), live: 'organization_not_found',
  },
  'POST /v1/organizations/{id}/entitlements': {
    why: "Part B: entitlements.manage (platform or the app's confined key) or the owner, who may name any Organization; a caller with no right over A is refused the function (403) whatever the Organization, and learns nothing about it",
    ok: 201, allow: ['entitlements.manage', 'ownAppKey'], deny: FORBIDDEN, live: 'organization_not_found', blind: true,
    except: {
      'perm:organizations.manage': [FORBIDDEN, 'sees every Organization (so a ghost id may answer 404), may not grant'],
      otherAppKey: [nf('application_not_found'), "not the calling key's Application"],
    },
  },

  // ---- Audit (Part B Audit) ----
  'GET /v1/audit-events': {
    why: 'Part B: audit.view (platform or app-confined, filter forced); "a user without audit.view and without target_user_id=me gets 403"',
    ok: 200, allow: ['audit.view', 'ownAppKey', 'otherAppKey'], deny: FORBIDDEN, sees: ['audit.view', 'ownAppKey'],
  },
  'GET /v1/audit-events/{id}': {
    why: 'Part B: same visibility; 404 audit_event_not_found if not visible (target: an event about A)',
    ok: 200, allow: ['audit.view', 'ownAppKey'], deny: nf('audit_event_not_found'), live: 'audit_event_not_found',
  },

  // ---- Webhooks (Part B Webhooks: "the scope's owners and webhooks.manage"; others' subscriptions 404) ----
  'GET /v1/webhooks': { why: 'Part B: list visible subscriptions (the scope\'s owners and webhooks.manage)', ok: 200, allow: ['user', 'key'], sees: ['webhooks.manage', 'ownAppKey'] },
  'POST /v1/webhooks': {
    why: 'Part B: platform scope needs webhooks.manage; "anything else 403 forbidden"; a test key makes a test subscription',
    ok: 201, allow: ['webhooks.manage'], deny: FORBIDDEN,
  },
  'GET /v1/webhooks/{id}': { why: 'Part B Webhooks', ok: 200, allow: ['webhooks.manage', 'ownAppKey'], deny: nf('webhook_not_found'), live: 'webhook_not_found' },
  'PATCH /v1/webhooks/{id}': { why: 'Part B Webhooks', ok: 200, allow: ['webhooks.manage', 'ownAppKey'], deny: nf('webhook_not_found'), live: 'webhook_not_found' },
  'DELETE /v1/webhooks/{id}': { why: 'Part B Webhooks', ok: 204, allow: ['webhooks.manage', 'ownAppKey'], deny: nf('webhook_not_found'), live: 'webhook_not_found' },
  'POST /v1/webhooks/{id}/rotate-secret': { why: 'Part B Webhooks', ok: 200, allow: ['webhooks.manage', 'ownAppKey'], deny: nf('webhook_not_found'), live: 'webhook_not_found' },
  'POST /v1/webhooks/{id}/test': { why: 'Part B Webhooks', ok: 202, allow: ['webhooks.manage', 'ownAppKey'], deny: nf('webhook_not_found'), live: 'webhook_not_found' },
  'GET /v1/webhooks/{id}/deliveries': { why: 'Part B Webhooks', ok: 200, allow: ['webhooks.manage', 'ownAppKey'], deny: nf('webhook_not_found'), live: 'webhook_not_found' },
  'POST /v1/webhooks/{id}/deliveries/{deliveryId}/redeliver': { why: 'Part B Webhooks', ok: 202, allow: ['webhooks.manage', 'ownAppKey'], deny: nf('webhook_not_found'), live: 'webhook_not_found' },

  // ---- Tenancy and billing (Part B; decisions "Tenant visibility": owner, tenants.manage, billing.manage see it; seeing without the right → 403) ----
  'GET /v1/tenants': {
    why: "Part B: any user (own Tenants) or tenants.manage (all); a key without tenants.manage gets an empty page (test/tenancy/tenants.test.ts pins it); a Tenant lives in its owner's mode (decisions), so a test key does not see TA",
    ok: 200, allow: ['user', 'key'], sees: ['tenants.manage'],
  },
  'GET /v1/tenants/{id}': { why: "Part B: owner, tenants.manage, billing.manage; else 404; TA is live (a Tenant lives in its owner's mode)", ok: 200, allow: ['tenants.manage', 'billing.manage'], deny: nf('tenant_not_found'), live: 'tenant_not_found' },
  'POST /v1/tenants/{id}/tier-change-requests': { why: "Part B: tenants.manage; TA is live", ok: 201, allow: ['tenants.manage'], live: 'tenant_not_found' },
  'GET /v1/tenants/{id}/tier-change-requests': {
    why: "Part B: owner or tenants.manage; billing.manage sees the Tenant → 403; TA is live",
    ok: 200, allow: ['tenants.manage'], deny: nf('tenant_not_found'), live: 'tenant_not_found',
    except: { 'perm:billing.manage': [FORBIDDEN, 'sees the Tenant, may not read its requests'] },
  },
  'GET /v1/tenants/{id}/tier-change-requests/{requestId}': {
    why: "Part B: owner or tenants.manage; billing.manage sees the Tenant → 403; TA is live",
    ok: 200, allow: ['tenants.manage'], deny: nf('tenant_not_found'), live: 'tenant_not_found',
    except: { 'perm:billing.manage': [FORBIDDEN, 'sees the Tenant, may not read its requests'] },
  },
  'PATCH /v1/tenants/{id}/tier-change-requests/{requestId}': { why: 'Part B: tenants.manage; TA is live', ok: 200, allow: ['tenants.manage'], live: 'tenant_not_found' },
  'GET /v1/tenants/{id}/subscription': {
    why: 'Part B Billing: owner or billing.manage; User token',
    user: true, ok: 200, allow: ['billing.manage'], deny: nf('tenant_not_found'),
    except: { 'perm:tenants.manage': [FORBIDDEN, 'sees the Tenant, may not read billing'] },
  },
  'GET /v1/tenants/{id}/usage': { why: 'Part B Billing: owner, billing.manage or tenants.manage; User token', user: true, ok: 200, allow: ['billing.manage', 'tenants.manage'], deny: nf('tenant_not_found') },
  'POST /v1/tenants/{id}/billing/checkout-sessions': {
    why: 'Part B Billing: owner only; User token',
    user: true, ok: 201, allow: [], deny: nf('tenant_not_found'),
    except: {
      'perm:billing.manage': [FORBIDDEN, 'sees the Tenant; checkout is the owner\'s'],
      'perm:tenants.manage': [FORBIDDEN, 'sees the Tenant; checkout is the owner\'s'],
    },
  },
  'POST /v1/tenants/{id}/billing/portal-sessions': {
    why: 'Part B Billing: owner or billing.manage; User token',
    user: true, ok: 201, allow: ['billing.manage'], deny: nf('tenant_not_found'),
    except: {
      'perm:billing.manage': [err(409, 'no_billing_account'), 'allowed; TA never paid (Part B: "a Tenant that never paid gets 409 no_billing_account")'],
      'perm:tenants.manage': [FORBIDDEN, 'sees the Tenant, may not open the portal'],
    },
  },
};

/**
 * Non-/v1 routes the router may serve without the document describing them (catalog API9: every
 * exception is listed with its reason). A /v1 route can never be listed here.
 */
export const UNDOCUMENTED_ALLOWED: { pattern: RegExp; reason: string }[] = [
  { pattern: /^\/_dev\//, reason: 'operations.md: development clock and jobs, only with DEV_CLOCK=1, hidden from the description (schema.hide)' },
  { pattern: /^\/signin(\/|$)/, reason: 'operations.md: the hosted sign-in page (HTML for browsers, not an API operation)' },
  { pattern: /^\/(verify-email|reset-password|accept-invitation)$/, reason: 'decisions "Mailed links\' pages": the pages the mails\' token links open (HTML for browsers, not an API operation)' },
  { pattern: /^\/forgot-password$/, reason: 'decisions "Mailed links\' pages": the hosted page, linked from the sign-in page, that mails a reset link (HTML for browsers, not an API operation)' },
];
