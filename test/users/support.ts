// Helpers shared by the users, profiles, privacy and API key test files (test/users/*.test.ts).
// Everything under test goes through HTTP; direct SQL only observes side effects or sets up rows
// that no API creates yet (applications, entitlements, organizations, custom roles).
import assert from 'node:assert/strict';
import { randomBytes } from 'node:crypto';
import type { TestApp } from '../helpers/app.js';
import type { Mode } from '../../src/db/types.js';
export { assertError, call, sql, type InjectResponse } from '../helpers/http.js';
import { assertError, call, sql, type InjectResponse } from '../helpers/http.js';
export { latestToken, linkToken, mailsTo, type MailRow } from '../helpers/mail.js';

/** A strong password that is not the fixture PASSWORD. */
export const NEW_PASSWORD = 'amber-lantern-orchard-77';

export const rand = (n = 5) => randomBytes(n).toString('hex');

/** 422 validation_failed whose details.fields name exactly these paths (order ignored). */
export function assertFields(res: InjectResponse, paths: string[]): void {
  const error = assertError(res, 422, 'validation_failed');
  assert.ok(Array.isArray(error.details.fields), res.body);
  const got = [...new Set(error.details.fields.map((f: { path: string }) => f.path))].sort();
  assert.deepEqual(got, [...paths].sort(), res.body);
}

export function assertStatus(res: InjectResponse, status: number): any {
  assert.equal(res.statusCode, status, `expected ${status}, got ${res.statusCode} ${res.body}`);
  return res.body ? res.json() : null;
}

// ---- audit, outbox, sessions -------------------------------------------------------------------

export interface AuditRow {
  id: string;
  action: string;
  actor_type: string;
  actor_id: string | null;
  target_type: string | null;
  target_id: string | null;
  target_user_id: string | null;
  application_id: string | null;
  before: any;
  after: any;
  test_mode: boolean;
}

const AUDIT_COLUMNS = 'id, action, actor_type, actor_id, target_type, target_id, target_user_id, application_id, before, after, test_mode';

/** Audit rows about a user (target_user_id), oldest first, optionally of one action. */
export async function auditFor(t: TestApp, targetUserId: string, action?: string): Promise<AuditRow[]> {
  return sql<AuditRow>(
    t,
    `SELECT ${AUDIT_COLUMNS} FROM audit_events WHERE target_user_id = $1 ${action ? 'AND action = $2' : ''} ORDER BY created_at, id`,
    action ? [targetUserId, action] : [targetUserId],
  );
}

/** Audit rows about any target (an API key id, ...), oldest first. */
export async function auditOfTarget(t: TestApp, targetId: string, action?: string): Promise<AuditRow[]> {
  return sql<AuditRow>(
    t,
    `SELECT ${AUDIT_COLUMNS} FROM audit_events WHERE target_id = $1 ${action ? 'AND action = $2' : ''} ORDER BY created_at, id`,
    action ? [targetId, action] : [targetId],
  );
}

export interface OutboxRow {
  type: string;
  application_id: string | null;
  test_mode: boolean;
  data: any;
}

/** Webhook outbox rows whose data names this user, oldest first. */
export async function outboxFor(t: TestApp, userId: string): Promise<OutboxRow[]> {
  return sql<OutboxRow>(t, `SELECT type, application_id, test_mode, data FROM outbox_events WHERE data->>'user_id' = $1 ORDER BY seq`, [userId]);
}

export async function liveSessionCount(t: TestApp, userId: string): Promise<number> {
  return (await sql<{ n: number }>(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1 AND revoked_at IS NULL', [userId]))[0].n;
}

export async function sessionCount(t: TestApp, userId: string): Promise<number> {
  return (await sql<{ n: number }>(t, 'SELECT count(*)::int AS n FROM sessions WHERE user_id = $1', [userId]))[0].n;
}

export async function userRow(t: TestApp, userId: string): Promise<Record<string, any> | undefined> {
  return (await sql(t, 'SELECT * FROM users WHERE id = $1', [userId]))[0];
}

// ---- rows no API creates yet -------------------------------------------------------------------

export interface TestApplication {
  id: string;
  slug: string;
  tenantId: string;
}

/** A tenant and an Application (owned by `owner` or `ownerOrganization` when given) declaring app.<slug>.read. */
export async function createApplication(
  t: TestApp,
  opts: { owner?: string | null; ownerOrganization?: string | null; slug?: string } = {},
): Promise<TestApplication> {
  const slug = opts.slug ?? `a${rand(4)}`;
  const tenantId = `tnt_${rand(8)}`;
  await sql(t, `INSERT INTO tenants (id, owner_type, owner_user_id, plan, created_at, updated_at) VALUES ($1, 'user', $2, 'starter', now(), now())`, [
    tenantId,
    opts.owner ?? null,
  ]);
  await sql(
    t,
    `INSERT INTO applications (id, slug, name, launch_url, owner_user_id, owner_organization_id, tenant_id, permissions, created_at, updated_at)
     VALUES ($1, $2, $3, 'https://x.example', $4, $5, $6, $7::jsonb, now(), now())`,
    [`app_${slug}`, slug, `App ${slug}`, opts.owner ?? null, opts.ownerOrganization ?? null, tenantId, JSON.stringify([{ key: `app.${slug}.read`, description: 'r' }])],
  );
  return { id: `app_${slug}`, slug, tenantId };
}

/** A personal entitlement row (an access path); starts a minute before the service clock. */
export async function grant(
  t: TestApp,
  userId: string,
  applicationId: string,
  opts: { status?: 'active' | 'disabled' | 'revoked' | 'expired'; mode?: Mode } = {},
): Promise<string> {
  const id = `ent_${rand(8)}`;
  const now = t.clock.now();
  await sql(
    t,
    `INSERT INTO entitlements (id, user_id, application_id, status, source, starts_at, test_mode, created_at, updated_at)
     VALUES ($1, $2, $3, $4, 'admin_grant', $5, $6, $7, $7)`,
    [id, userId, applicationId, opts.status ?? 'active', new Date(now.getTime() - 60_000), (opts.mode ?? 'live') === 'test', now],
  );
  return id;
}

/** An organization with active members (the first one org_admin). */
export async function createOrganization(t: TestApp, memberIds: string[], opts: { mode?: Mode } = {}): Promise<string> {
  const id = `org_${rand(8)}`;
  const now = t.clock.now();
  await sql(t, `INSERT INTO organizations (id, name, created_by, test_mode, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $5)`, [
    id,
    `Org ${id}`,
    memberIds[0] ?? 'usr_fixture',
    (opts.mode ?? 'live') === 'test',
    now,
  ]);
  for (const [i, userId] of memberIds.entries()) {
    await sql(
      t,
      `INSERT INTO organization_members (organization_id, user_id, role, membership_status, invited_at, joined_at) VALUES ($1, $2, $3, 'active', $4, $4)`,
      [id, userId, i === 0 ? 'org_admin' : 'member', now],
    );
  }
  return id;
}

/** An organization-wide grant (entitlement with organization_id) to an Application. */
export async function orgGrant(
  t: TestApp,
  organizationId: string,
  applicationId: string,
  opts: { memberScope?: 'all_members' | 'allowlist' | 'denylist'; overrides?: string[]; mode?: Mode } = {},
): Promise<string> {
  const id = `ent_${rand(8)}`;
  const now = t.clock.now();
  await sql(
    t,
    `INSERT INTO entitlements (id, organization_id, application_id, status, source, starts_at, member_scope, member_overrides, test_mode, created_at, updated_at)
     VALUES ($1, $2, $3, 'active', 'org_seat', $4, $5, $6, $7, $8, $8)`,
    [id, organizationId, applicationId, new Date(now.getTime() - 60_000), opts.memberScope ?? 'all_members', opts.overrides ?? [], (opts.mode ?? 'live') === 'test', now],
  );
  return id;
}

/** A custom platform Role (assign it with createUser({roles: [id]})). */
export async function createPlatformRole(t: TestApp, permissions: string[]): Promise<string> {
  const name = `custom${rand(4)}`;
  const id = `role_platform_${name}`;
  await sql(t, `INSERT INTO roles (id, name, scope, permissions, created_at, updated_at) VALUES ($1, $2, 'platform', $3, now(), now())`, [id, name, permissions]);
  return id;
}

export const DAY = 86400;

/**
 * The calls of the admin create, invitation and email change tests (test/users/admin-create.test.ts,
 * invitations.test.ts, email-changes.test.ts) on the file's test app, as its admin unless another
 * token is given, read when called (before() signs the admin in; a test may sign in again).
 */
export function userCalls(file: () => { t: TestApp; admin: { token: string } }) {
  const create = (payload: object, token = file().admin.token) => call(file().t, 'POST', '/v1/users', token, payload);
  const resend = (id: string, token = file().admin.token) => call(file().t, 'POST', `/v1/users/${id}/invitation`, token);
  const patch = (id: string, payload: object, token = file().admin.token) => call(file().t, 'PATCH', `/v1/users/${id}`, token, payload);

  /** Counts of users, audit rows, outbox rows and mails, to show a refused call wrote nothing. */
  async function writes() {
    const count = async (table: string) => (await sql<{ n: number }>(file().t, `SELECT count(*)::int AS n FROM ${table}`))[0].n;
    return { users: await count('users'), audit: await count('audit_events'), outbox: await count('outbox_events'), mails: await count('emails') };
  }

  return { create, resend, patch, writes };
}
