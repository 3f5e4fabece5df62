// IV-5, IC-4, IC-5, IC-6, IC-7 and FT-3 across two server processes on one PostgreSQL ([MP]): the
// catalog rows test/security/core/ runs in one process (where the embedded store's single connection
// serializes every transaction), here with real concurrency. IV-5: 20 signups with one email; IC-4:
// grants, the Starter app cap, one slug, 10 Organizations a day and the webhook cap; IC-5: two
// org admins demoting or removing each other; IC-6: two PATCHes with one If-Match; IC-7: suspends and
// role assignments; FT-3: kill -9 of the process holding an Idempotency-Key claim mid-request.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import pg from 'pg';
import { Cluster, sleep, type Reply } from './cluster.js';
import { adminKey, errorCode, expectStatus, newApp, PASSWORD, rand, signup, tally, uniqueEmail, type Account } from './fixtures.js';

let c: Cluster;
let admin: string;
before(async () => {
  c = await Cluster.start({ env: { WEBHOOK_ALLOW_PRIVATE_TARGETS: '1' } });
  admin = await adminKey(c);
  await c.warm(10);
});
after(() => c?.close());

const idem = () => ({ 'idempotency-key': `k${rand(6)}` });
const count = async (text: string, params: unknown[]) => (await c.sql<{ n: number }>(`SELECT count(*)::int AS n FROM ${text}`, params))[0].n;
/** Exactly `want` answers are 201 and every other one is `status` with `code`; returns the problems. */
function winners(rs: Reply[], want: number, status: number, code: string, label: string): string[] {
  const problems: string[] = [];
  const ok = rs.filter((r) => r.status === 201).length;
  if (ok !== want) problems.push(`${label}: ${ok} × 201 (want ${want}) ${JSON.stringify(tally(rs))}`);
  for (const r of rs) if (r.status !== 201 && !(r.status === status && errorCode(r) === code)) problems.push(`${label}: ${r.status} ${r.text.slice(0, 150)}`);
  return problems;
}

test('IV-5 [MP] 20 concurrent signups with one email (mixed case), 10 on each process: "exactly one 201 and the rest 409 email_taken", one account (5 runs)', async () => {
  const problems: string[] = [];
  for (let run = 0; run < 5; run++) {
    const email = uniqueEmail('iv5mp');
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) =>
      c.node(i).call('POST', '/v1/auth/signup', { body: { email: i % 3 ? email : email.toUpperCase(), password: PASSWORD } })));
    problems.push(...winners(rs, 1, 409, 'email_taken', `run ${run}`));
    const accounts = await count('users WHERE lower(email) = lower($1)', [email]);
    if (accounts !== 1) problems.push(`run ${run}: ${accounts} accounts`);
  }
  assert.deepEqual(problems, []);
});

test('IC-4 [MP] "exactly the allowed number succeed" across two processes: 20 personal grants with different keys, 10 app creations on a Starter owner (cap 1), 8 creations of one slug, 14 org creations (10 a day), webhook creations past the Starter cap', async () => {
  const problems: string[] = [];
  const owner = await signup(c.a);
  const app = await newApp(c.a, admin, owner.id);
  for (let run = 0; run < 3; run++) {
    const u = await signup(c.b);
    const rs = await Promise.all(Array.from({ length: 20 }, (_, i) =>
      c.node(i).call('POST', `/v1/users/${u.id}/entitlements`, { token: admin, body: { application_id: app.id, source: 'admin_grant' }, headers: idem() })));
    problems.push(...winners(rs, 1, 409, 'entitlement_already_exists', `grants run ${run}`));
    const rows = await count('entitlements WHERE user_id = $1', [u.id]);
    if (rows !== 1) problems.push(`grants run ${run}: ${rows} rows`);
  }
  const createApp = (node: number, slug: string, ownerId: string) =>
    c.node(node).call('POST', '/v1/applications', { token: admin, headers: idem(), body: { slug, name: 'A', launch_url: 'https://a.example.com', owner_user_id: ownerId } });
  for (let run = 0; run < 3; run++) {
    const o = await signup(c.a);
    problems.push(...winners(await Promise.all(Array.from({ length: 10 }, (_, i) => createApp(i, `s${rand(4)}`, o.id))), 1, 409, 'plan_limit_reached', `apps run ${run}`));
    const slug = `z${rand(4)}`;
    const owners = await Promise.all(Array.from({ length: 8 }, (_, i) => signup(c.node(i))));
    problems.push(...winners(await Promise.all(owners.map((ow, i) => createApp(i, slug, ow.id))), 1, 409, 'slug_taken', `slug run ${run}`));
  }
  for (let run = 0; run < 2; run++) {
    const creator = await signup(c.a);
    const rs = await Promise.all(Array.from({ length: 14 }, (_, i) =>
      c.node(i).call('POST', '/v1/organizations', { token: creator.access_token, headers: idem(), body: { name: `O${i}` } })));
    problems.push(...winners(rs, 10, 429, 'rate_limited', `orgs run ${run}`));
    const orgs = await count('organization_members WHERE user_id = $1', [creator.id]);
    if (orgs !== 10) problems.push(`orgs run ${run}: ${orgs} Organizations`);
  }
  for (let run = 0; run < 2; run++) {
    const o = await signup(c.a);
    const capped = await newApp(c.a, admin, o.id);
    const limit = expectStatus(await c.a.call('GET', `/v1/tenants/${capped.tenant_id}/usage`, { token: o.access_token }), 200).limits.webhooks.limit;
    assert.equal(typeof limit, 'number', 'Starter caps webhooks');
    const rs = await Promise.all(Array.from({ length: limit + 6 }, (_, i) =>
      c.node(i).call('POST', '/v1/webhooks', { token: o.access_token, headers: idem(), body: { scope: capped.id, url: `http://127.0.0.1:9/h${i}`, events: ['*'] } })));
    problems.push(...winners(rs, limit, 409, 'plan_limit_reached', `webhooks run ${run} (cap ${limit})`));
  }
  assert.deepEqual(problems, []);
});

test('IC-5 [MP] two org admins of a two-admin org demote or remove each other, one request on each process: "at least one admin remains" (20 runs); the last member role removed 4× concurrently is kept', async () => {
  const problems: string[] = [];
  for (let run = 0; run < 20; run++) {
    const [a, b] = [await signup(c.a), await signup(c.b)];
    const org = expectStatus(await c.a.call('POST', '/v1/organizations', { token: a.access_token, body: { name: 'O' } }), 201);
    expectStatus(await c.a.call('POST', `/v1/organizations/${org.id}/members`, { token: admin, body: { user_id: b.id, role: 'org_admin' } }), 201);
    const kind = run % 3; // 0: both demote, 1: both remove, 2: one demotes, one removes
    const op = (node: number, actor: Account, target: Account, remove: boolean) => remove
      ? c.node(node).call('DELETE', `/v1/organizations/${org.id}/members/${target.id}`, { token: actor.access_token })
      : c.node(node).call('PATCH', `/v1/organizations/${org.id}/members/${target.id}`, { token: actor.access_token, body: { role: 'member' } });
    const rs = await Promise.all([op(0, a, b, kind === 1), op(1, b, a, kind !== 0)]);
    const admins = await count(`organization_members WHERE organization_id = $1 AND role = 'org_admin' AND membership_status = 'active'`, [org.id]);
    if (admins < 1) problems.push(`run ${run} (kind ${kind}): no admin left; ${rs.map((r) => `${r.status} ${errorCode(r)}`).join(', ')}`);
  }
  const u = await signup(c.a);
  const removals = await Promise.all([0, 1, 2, 3].map((i) => c.node(i).call('DELETE', `/v1/users/${u.id}/roles/role_platform_member`, { token: admin })));
  for (const r of removals) if (!(r.status === 409 && errorCode(r) === 'member_role_required')) problems.push(`member role removal: ${r.status} ${r.text.slice(0, 120)}`);
  if ((await count(`role_assignments WHERE user_id = $1 AND role_id = 'role_platform_member'`, [u.id])) !== 1) problems.push('the member role is gone');
  assert.deepEqual(problems, []);
});

test('IC-6 [MP] two PATCHes of one entitlement with the same If-Match, one on each process: "one 200, one 412"; one entitlement.updated audit row whose after is the stored row (10 runs)', async () => {
  const problems: string[] = [];
  const owner = await signup(c.a);
  const app = await newApp(c.a, admin, owner.id);
  for (let run = 0; run < 10; run++) {
    const u = await signup(c.b);
    const ent = expectStatus(await c.a.call('POST', `/v1/users/${u.id}/entitlements`, { token: admin, body: { application_id: app.id, source: 'admin_grant' }, headers: idem() }), 201);
    const etag = String((await c.a.call('GET', `/v1/entitlements/${ent.id}`, { token: admin })).headers.etag);
    const now = (await c.now()).getTime();
    const rs = await Promise.all([10, 20].map((days, i) => c.node(i).call('PATCH', `/v1/entitlements/${ent.id}`, {
      token: admin, body: { ends_at: new Date(now + days * 86400_000).toISOString() }, headers: { 'if-match': etag },
    })));
    const statuses = rs.map((r) => `${r.status}${r.status === 412 ? ` ${errorCode(r)}` : ''}`).sort().join(',');
    if (statuses !== '200,412 precondition_failed') { problems.push(`run ${run}: ${statuses}`); continue; }
    const winner = rs.find((r) => r.status === 200)!.json();
    const audits = await c.sql<{ after: { ends_at: string } }>(`SELECT after FROM audit_events WHERE target_id = $1 AND action = 'entitlement.updated'`, [ent.id]);
    const [row] = await c.sql<{ ends_at: Date }>('SELECT ends_at FROM entitlements WHERE id = $1', [ent.id]);
    if (audits.length !== 1 || Date.parse(audits[0].after.ends_at) !== Date.parse(winner.ends_at) || row.ends_at.getTime() !== Date.parse(winner.ends_at)) {
      problems.push(`run ${run}: ${audits.length} audit rows; stored ${row.ends_at.toISOString()}, winner ${winner.ends_at}`);
    }
  }
  assert.deepEqual(problems, []);
});

test('IC-7 [MP] 10 concurrent suspends and 10 concurrent assignments of one role, split over two processes: "one state change", one user.suspended (and one access.revoked), one role.assigned; "the others get 200 with no event" (5 runs)', async () => {
  const problems: string[] = [];
  const owner = await signup(c.a);
  const app = await newApp(c.a, admin, owner.id);
  for (let run = 0; run < 5; run++) {
    const u = await signup(c.a);
    expectStatus(await c.a.call('POST', `/v1/users/${u.id}/entitlements`, { token: admin, body: { application_id: app.id, source: 'admin_grant' }, headers: idem() }), 201);
    const suspends = await Promise.all(Array.from({ length: 10 }, (_, i) => c.node(i).call('POST', `/v1/users/${u.id}/suspend`, { token: admin, body: { reason: 'r' } })));
    if (!suspends.every((r) => r.status === 200)) problems.push(`suspend run ${run}: ${JSON.stringify(tally(suspends))}`);
    const suspended = await count(`outbox_events WHERE type = 'user.suspended' AND data->>'user_id' = $1`, [u.id]);
    const revoked = await count(`outbox_events WHERE type = 'access.revoked' AND data->>'user_id' = $1`, [u.id]);
    const audits = await count(`audit_events WHERE action = 'user.suspended' AND target_id = $1`, [u.id]);
    if (suspended !== 1 || revoked !== 1 || audits !== 1) problems.push(`suspend run ${run}: user.suspended ${suspended}, access.revoked ${revoked}, audit ${audits}`);
    const v = await signup(c.b);
    const assigns = await Promise.all(Array.from({ length: 10 }, (_, i) => c.node(i).call('POST', `/v1/users/${v.id}/roles/role_platform_support`, { token: admin, body: {} })));
    const created = assigns.filter((r) => r.status === 201).length;
    const assigned = await count(`outbox_events WHERE type = 'role.assigned' AND data->>'user_id' = $1`, [v.id]);
    if (created !== 1 || !assigns.every((r) => r.status === 200 || r.status === 201) || assigned !== 1) problems.push(`assign run ${run}: ${JSON.stringify(tally(assigns))}, role.assigned ${assigned}`);
  }
  assert.deepEqual(problems, []);
});

test('FT-3 [MP] kill -9 of the process running a request whose Idempotency-Key it claimed: the key answers 409 idempotency_key_in_flight until the documented 60 s lease lapses, then the retry on the other process runs once (one row, one audit event, one outbox event) and later retries replay it', async () => {
  const owner = await signup(c.a);
  const app = await newApp(c.a, admin, owner.id);
  const user = expectStatus(await c.a.call('POST', '/v1/users', { token: admin, body: { email: uniqueEmail('ft3'), status: 'active', send_invitation: false } }), 201);
  const key = `ft3-${rand(6)}`;
  const send = (n: number) => c.node(n).call('POST', `/v1/users/${user.id}/entitlements`, { token: admin, body: { application_id: app.id, source: 'admin_grant' }, headers: { 'idempotency-key': key } });
  const claimOf = async () => (await c.sql<{ status: string }>('SELECT status FROM idempotency_keys WHERE key = $1', [key])).map((r) => r.status);
  // The request claims its key, then waits on a lock this test holds on the table it writes.
  const locker = new pg.Client({ connectionString: c.databaseUrl });
  await locker.connect();
  try {
    await locker.query('BEGIN');
    await locker.query('LOCK TABLE entitlements IN ACCESS EXCLUSIVE MODE');
    const pending = send(0).catch(() => null);
    for (let i = 0; i < 100 && (await claimOf()).length === 0; i++) await sleep(100);
    assert.deepEqual(await claimOf(), ['in_flight']);
    await c.a.kill();
    await pending;
    await locker.query('ROLLBACK');
  } finally {
    await locker.end();
  }
  const early = await send(1);
  assert.equal(early.status, 409, early.text);
  assert.equal(errorCode(early), 'idempotency_key_in_flight');
  assert.equal(await count('entitlements WHERE user_id = $1', [user.id]), 0, 'the killed request committed nothing');
  await c.advanceClock(61);
  const late = await send(1);
  assert.equal(late.status, 201, late.text);
  assert.equal(late.headers['idempotent-replayed'], undefined);
  const id = late.json().id;
  assert.deepEqual([
    await count('entitlements WHERE user_id = $1', [user.id]),
    await count(`audit_events WHERE action = 'entitlement.granted' AND target_id = $1`, [id]),
    await count(`outbox_events WHERE type = 'entitlement.granted' AND data->'entitlement'->>'id' = $1`, [id]),
  ], [1, 1, 1]);
  await c.a.start();
  for (const n of [0, 1]) {
    const again = await send(n);
    assert.equal(again.status, 201);
    assert.equal(again.text, late.text);
    assert.equal(again.headers['idempotent-replayed'], 'true');
  }
});
