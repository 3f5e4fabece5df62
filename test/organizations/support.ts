// Helpers for the organization test files: everything under test goes through HTTP; direct SQL only
// observes side effects (audit_events, outbox_events, emails, membership rows).
import assert from 'node:assert/strict';
import type { TestApp } from '../helpers/app.js';
import { commitWhileWaiting } from '../helpers/locks.js';
import { assertStatus, call, person, rand, sql, type InjectResponse, type Person } from '../access/support.js';

export * from '../access/support.js';

export interface OrgFixture {
  id: string;
  name: string;
  owner: Person;
  members: Person[];
}

/** POST /v1/organizations with a fresh user's token (201 asserted); the caller is its first org_admin. */
export async function createOrgApi(t: TestApp, owner?: Person, name = `Org ${rand(4)}`): Promise<{ org: any; owner: Person }> {
  const who = owner ?? (await person(t));
  const org = assertStatus(await call(t, 'POST', '/v1/organizations', who.token, { name }), 201);
  return { org, owner: who };
}

/** An Organization created through the API, plus `count` active plain members added by user_id with `admin` (organizations.manage). */
export async function orgWithMembers(t: TestApp, admin: string, count = 0): Promise<OrgFixture> {
  const { org, owner } = await createOrgApi(t);
  const members: Person[] = [];
  for (let i = 0; i < count; i++) {
    const m = await person(t);
    const res = assertStatus(await call(t, 'POST', `/v1/organizations/${org.id}/members`, admin, { user_id: m.id }), 201);
    assert.equal(res.membership_status, 'active');
    members.push(m);
  }
  return { id: org.id, name: org.name, owner, members };
}

export function invite(t: TestApp, cred: string, orgId: string, email: string, role?: 'org_admin' | 'member') {
  return call(t, 'POST', `/v1/organizations/${orgId}/members`, cred, { email, ...(role ? { role } : {}) });
}

export function addById(t: TestApp, cred: string, orgId: string, userId: string, role?: 'org_admin' | 'member') {
  return call(t, 'POST', `/v1/organizations/${orgId}/members`, cred, { user_id: userId, ...(role ? { role } : {}) });
}

export function accept(t: TestApp, cred: string, orgId: string) {
  return call(t, 'POST', `/v1/organizations/${orgId}/members/me/accept`, cred, {});
}

export function orgGrantReq(t: TestApp, cred: string, orgId: string, body: Record<string, unknown>, idempotencyKey: string | null = `idem-${rand(8)}`) {
  return call(t, 'POST', `/v1/organizations/${orgId}/entitlements`, cred, body, idempotencyKey ? { 'idempotency-key': idempotencyKey } : {});
}

/** Creates an organization-wide grant through the API (201 asserted). */
export async function orgGrantApi(t: TestApp, cred: string, orgId: string, applicationId: string, extra: Record<string, unknown> = {}): Promise<any> {
  return assertStatus(await orgGrantReq(t, cred, orgId, { application_id: applicationId, ...extra }), 201);
}

export async function membership(t: TestApp, orgId: string, userId: string): Promise<Record<string, any> | undefined> {
  return (await sql(t, 'SELECT * FROM organization_members WHERE organization_id = $1 AND user_id = $2', [orgId, userId]))[0];
}

/** Audit rows about one Organization, optionally one action and one target user, oldest first. */
export async function orgAudit(t: TestApp, orgId: string, action?: string, targetUserId?: string): Promise<any[]> {
  const params: unknown[] = [orgId];
  let where = 'organization_id = $1';
  if (action) where += ` AND action = $${params.push(action)}`;
  if (targetUserId) where += ` AND target_user_id = $${params.push(targetUserId)}`;
  return sql(t, `SELECT * FROM audit_events WHERE ${where} ORDER BY created_at, id`, params);
}

/** organization.member_* outbox rows for one Organization (optionally one user), oldest first. */
export async function memberWebhooks(t: TestApp, orgId: string, userId?: string): Promise<any[]> {
  const params: unknown[] = [orgId];
  let where = `type LIKE 'organization.member%' AND data->>'organization_id' = $1`;
  if (userId) where += ` AND data->>'user_id' = $${params.push(userId)}`;
  return sql(t, `SELECT type, data FROM outbox_events WHERE ${where} ORDER BY seq`, params);
}

export async function mails(t: TestApp, to: string, template = 'organization_invitation'): Promise<any[]> {
  return sql(t, 'SELECT template, to_address, subject, text_body FROM emails WHERE lower(to_address) = lower($1) AND template = $2 ORDER BY created_at, id', [to, template]);
}

/**
 * PostgreSQL only: a transaction of the test's own locks the Organization's row, as a write of it does,
 * and makes `change` (say, a suspension); `request` is started, and once it waits for that lock the
 * change commits. Returns the request's answer: what it did after a change committed while it waited.
 */
export const afterChangeCommitsMeanwhile = (t: TestApp, orgId: string, change: [string, unknown[]], request: () => Promise<InjectResponse>): Promise<InjectResponse> =>
  commitWhileWaiting(t, [['SELECT 1 FROM organizations WHERE id = $1 FOR NO KEY UPDATE', [orgId]], change], request);
