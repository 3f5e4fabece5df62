// AZ-4 seed: mirrored data in live and test mode (the same emails in both): users (through the users
// service, as the shared fixtures make them) in every status, sessions, and through the API personal
// and org-wide Entitlements,
// Organizations with active and pending members, role assignments, profiles, API keys, webhook
// subscriptions (platform and application scope) with deliveries, and the audit trail of it all.
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { TestApp } from '../../helpers/app.js';
import type { Mode } from '../../../src/db/types.js';
import { createUser } from '../../helpers/fixtures.js';
import { ALL_PERMISSIONS, assertStatus, call, grant, newApp, patchEnt, person, platformKey, sql, type AppFixture } from '../../access/support.js';
import type { Receiver } from '../../webhooks/support.js';
import { systemCtx } from '../../../src/context.js';
import { issueSession } from '../../../src/modules/auth/sessions.js';

export interface Caller {
  mode: Mode;
  label: string;
  cred: string;
}

export interface Seeded {
  callers: Caller[];
  apps: AppFixture[];
  emails: Record<string, string>;
  subscriptions: { mode: Mode; path: string; id: string }[];
}

const MODES: Mode[] = ['live', 'test'];

/** Seeds both modes; the Applications are shared catalog rows (one owned by a user of each mode). */
export async function seedBothModes(t: TestApp, receiver: Receiver): Promise<Seeded> {
  const tag = randomBytes(3).toString('hex');
  const emails = Object.fromEntries(['admin', 'alice', 'bob', 'carol', 'dave', 'erin'].map((n) => [n, `az4-${n}-${tag}@example.com`]));
  const admins = { live: await platformKey(t, ALL_PERMISSIONS, 'live'), test: await platformKey(t, ALL_PERMISSIONS, 'test') };
  const apps = [await newApp(t, admins.live, {}, { ownerMode: 'live' }), await newApp(t, admins.test, {}, { ownerMode: 'test' })];
  const callers: Caller[] = [];
  const subscriptions: Seeded['subscriptions'] = [];
  for (const [i, mode] of MODES.entries()) {
    const admin = admins[mode];
    const own = apps[i];
    const superadmin = await person(t, { mode, roles: ['superadmin'], email: emails.admin });
    // API keys made through the API by a user of this mode, of this mode.
    const appKey = assertStatus(await call(t, 'POST', '/v1/api-keys', superadmin.token, {
      name: `az4 ${mode} app key`, scope: own.id, permissions: ['users.list', 'entitlements.manage', 'audit.view', 'roles.manage'], mode,
    }), 201).secret;
    const auditKey = assertStatus(await call(t, 'POST', '/v1/api-keys', superadmin.token, { name: `az4 ${mode} audit key`, scope: 'platform', permissions: ['audit.view', 'users.list'], mode }), 201).secret;
    // Subscriptions first, so that they see every event below.
    for (const [path, cred, body] of [[`/${mode}-platform`, admin, { scope: 'platform' }], [`/${mode}-app`, appKey, {}]] as const) {
      const sub = assertStatus(await call(t, 'POST', '/v1/webhooks', cred, { ...body, url: receiver.url(path), events: ['*'], description: `az4 ${mode}` }), 201);
      subscriptions.push({ mode, path, id: sub.id });
    }
    // The same emails in both modes: each create succeeds.
    const alice = await person(t, { mode, email: emails.alice });
    const bob = await createUser(t, { mode, email: emails.bob });
    const carol = await createUser(t, { mode, email: emails.carol });
    const dave = await createUser(t, { mode, email: emails.dave, status: 'invited' });
    const erin = await createUser(t, { mode, email: emails.erin });
    for (const app of apps) await grant(t, admin, alice.id, app.id, { source: 'trial', ends_at: new Date(t.clock.now().getTime() + 30 * 86400_000).toISOString() });
    const bobGrant = await grant(t, admin, bob.id, own.id, { order_id: `ord-${mode}-${tag}` });
    assertStatus(await patchEnt(t, admin, bobGrant.id, { status: 'disabled', disabled_reason: `az4 ${mode}` }), 200);
    const carolGrant = await grant(t, admin, carol.id, apps[1 - i].id);
    assertStatus(await patchEnt(t, admin, carolGrant.id, { status: 'revoked', disabled_reason: `az4 ${mode}` }), 200);
    await grant(t, admin, dave.id, own.id);
    assertStatus(await call(t, 'POST', `/v1/users/${carol.id}/suspend`, admin, {}), 200);
    assertStatus(await call(t, 'POST', `/v1/users/${bob.id}/suspend`, admin, {}), 200);
    assertStatus(await call(t, 'PATCH', `/v1/users/${bob.id}`, admin, { status: 'active' }), 200);
    assert.equal((await call(t, 'DELETE', `/v1/users/${erin.id}`, admin)).statusCode, 204);
    // An Organization with an admin, an active member, a pending invitee and an org-wide grant.
    const org = assertStatus(await call(t, 'POST', '/v1/organizations', superadmin.token, { name: `AZ4 ${mode} org ${tag}` }), 201);
    assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: bob.id }), 201);
    assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, superadmin.token, { email: emails.dave }), 201);
    assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/entitlements`, admin, { application_id: own.id, member_scope: 'denylist', member_overrides: [] }, { 'idempotency-key': `az4-${mode}-${tag}` }), 201);
    assertStatus(await call(t, 'POST', `/v1/users/${bob.id}/roles/role_platform_support`, admin, {}), 201);
    assertStatus(await call(t, 'PATCH', `/v1/users/${alice.id}/profile`, admin, { display_name: `Alice ${mode}` }), 200);
    assertStatus(await call(t, 'PATCH', `/v1/users/${alice.id}/apps/${own.id}/profile`, admin, { display_handle: `alice-${mode}`, custom: { mode } }), 200);
    callers.push(
      { mode, label: 'platform key', cred: admin },
      { mode, label: 'superadmin user', cred: superadmin.token },
      { mode, label: 'plain user', cred: alice.token },
      { mode, label: 'org member', cred: await sessionFor(t, bob.id, mode) },
      { mode, label: 'app key', cred: appKey },
      { mode, label: 'audit key', cred: auditKey },
    );
  }
  for (const s of subscriptions) assertStatus(await call(t, 'POST', `/v1/webhooks/${s.id}/test`, admins[s.mode], {}), 202);
  return { callers, apps, emails, subscriptions };
}

/** A User token of a new session (started through the sign-in service, as person() does). */
async function sessionFor(t: TestApp, userId: string, mode: Mode): Promise<string> {
  const ctx = systemCtx(t.deps, mode);
  const auth = await ctx.db.transaction((tx) => issueSession(tx, { ...ctx, db: tx }, { id: userId, email_verified: true, test_mode: mode === 'test' }, ['pwd']));
  return auth.access_token;
}

/** Every row id of the seeded world with its mode (system connection: row-level security off). */
export async function idsByMode(t: TestApp): Promise<Map<string, { mode: Mode; table: string }>> {
  const tables = ['users', 'sessions', 'entitlements', 'organizations', 'audit_events', 'webhook_subscriptions', 'webhook_deliveries', 'outbox_events', 'api_keys'];
  const ids = new Map<string, { mode: Mode; table: string }>();
  for (const table of tables) {
    for (const r of await sql<{ id: string; test_mode: boolean }>(t, `SELECT id, test_mode FROM ${table}`)) ids.set(r.id, { mode: r.test_mode ? 'test' : 'live', table });
  }
  return ids;
}
