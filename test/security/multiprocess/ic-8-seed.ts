// Work for each IC-8 job, made over HTTP on one server process at the service's present time; the
// test then moves the shared development clock 31 days so that all of it is due at once. The four
// jobs' rows are kept apart (live rows never reach test-mode ones; erased users hold no expiring
// grant), so each effect has one job that may cause it, whatever order the jobs run in.
import { type Cluster } from './cluster.js';
import { adminKey, ALL_PERMISSIONS, expectStatus, mapLimit, newApp, rand, settled, signup, uniqueEmail } from './fixtures.js';

export interface JobWork {
  /** Entitlement ids (personal and one organization-wide) whose ends_at will have passed. */
  expiring: string[];
  /** The (user, Application) pairs that lose access when they expire: one access.revoked each. */
  flips: { user_id: string; application_id: string }[];
  /** Pairs an expiring row reaches that keep access by another path (or had none): no access event. */
  unflipped: number;
  /** Users with an erasure request whose 7 days will have passed. */
  erasures: string[];
  /** The erased user who is an active member of an Organization: one organization.member_removed. */
  erasedMember: string;
  /** Test-mode grants the purge hard-deletes: one entitlement.deleted (webhook and audit) each. */
  testGrants: string[];
  /** Unhealthy subscriptions past their 5 days, and the owner each one's disable mail goes to. */
  webhooks: { id: string; ownerEmail: string }[];
  describe: string;
}

const FLIPPING = 12;
const KEPT = 4;
const DISABLED = 3;
const ORG_MEMBERS = 4;
const ERASURES = 4;
const TEST_USERS = 4;
const WEBHOOKS = 3;
/** A public address literal: creation needs no DNS, and no delivery is ever attempted (no workers). */
const WEBHOOK_URL = 'https://93.184.215.14/ic8';

export async function seedJobWork(c: Cluster): Promise<JobWork> {
  const node = c.a;
  const admin = await adminKey(c);
  const testKey = await adminKey(c, ALL_PERMISSIONS, { testMode: true });
  const post = async (token: string, path: string, body: unknown, status: number, idempotent = false) =>
    expectStatus(await settled(() => node.call('POST', path, { token, body, headers: idempotent ? { 'idempotency-key': `ic8-${rand(8)}` } : {} })), status);
  const newUser = (token = admin, status = 'active') => post(token, '/v1/users', { email: uniqueEmail('ic8'), status, send_invitation: status === 'invited' }, 201);
  const users = (n: number, token = admin) => mapLimit(Array.from({ length: n }), 4, () => newUser(token));
  const addMember = (orgId: string, userId: string) => post(admin, `/v1/organizations/${orgId}/members`, { user_id: userId }, 201);

  const owner = await newUser();
  const app = await newApp(node, admin, owner.id);
  const now = await c.now();
  const endsAt = new Date(now.getTime() + 3600_000).toISOString();
  const grant = (token: string, userId: string, extra: Record<string, unknown> = {}) =>
    post(token, `/v1/users/${userId}/entitlements`, { application_id: app.id, source: 'admin_grant', ...extra }, 201, true);

  // entitlement-expiry. O1 grants the Application for good; O2 until endsAt.
  const creator = await signup(node);
  const org = (name: string) => post(creator.access_token, '/v1/organizations', { name }, 201);
  const [o1, o2] = [await org('IC-8 lasting'), await org('IC-8 ending')];
  await post(admin, `/v1/organizations/${o1.id}/entitlements`, { application_id: app.id }, 201, true);
  const o2Grant = await post(admin, `/v1/organizations/${o2.id}/entitlements`, { application_id: app.id, ends_at: endsAt }, 201, true);
  const flipping = await users(FLIPPING);
  const kept = await users(KEPT);
  const disabled = await users(DISABLED);
  const members = await users(ORG_MEMBERS);
  const expiring: string[] = [o2Grant.id];
  const grantEnding = async (u: { id: string }) => {
    const row = await grant(admin, u.id, { ends_at: endsAt });
    expiring.push(row.id);
    return row;
  };
  await mapLimit([...flipping, ...kept], 4, grantEnding);
  for (const row of await mapLimit(disabled, 4, grantEnding)) {
    expectStatus(await node.call('PATCH', `/v1/entitlements/${row.id}`, { token: admin, body: { status: 'disabled', disabled_reason: 'IC-8' } }), 200);
  }
  await mapLimit(kept, 4, (u) => addMember(o1.id, u.id));
  await mapLimit(members, 4, (u) => addMember(o2.id, u.id));

  // erasure-cascade: one of the erased users is an active member of O1.
  const erased = await users(ERASURES);
  await addMember(o1.id, erased[0].id);
  await mapLimit(erased, 4, (u) => post(admin, `/v1/users/${u.id}/erasure-requests`, { reason: 'IC-8' }, 202));

  // test-purge: test-mode users (one invited by mail), two with a test-mode grant.
  const testUsers = [await newUser(testKey, 'invited'), ...(await users(TEST_USERS - 1, testKey))];
  const testGrants: string[] = [];
  for (const u of testUsers.slice(0, 2)) testGrants.push((await grant(testKey, u.id)).id);

  // webhook-health: each owner's own Application (Starter: one subscription each), unhealthy since now.
  const webhooks: JobWork['webhooks'] = [];
  for (let i = 0; i < WEBHOOKS; i++) {
    const hookOwner = await newUser();
    const hookApp = await newApp(node, admin, hookOwner.id);
    const sub = await post(admin, '/v1/webhooks', { scope: hookApp.id, url: `${WEBHOOK_URL}/${i}`, events: ['access.revoked'] }, 201);
    webhooks.push({ id: sub.id, ownerEmail: hookOwner.email });
  }
  await c.sql(`UPDATE webhook_subscriptions SET status = 'unhealthy', consecutive_failures = 3, unhealthy_since = $2 WHERE id = ANY($1)`, [webhooks.map((w) => w.id), now]);

  return {
    expiring,
    flips: [...flipping, ...members].map((u) => ({ user_id: u.id, application_id: app.id })),
    unflipped: KEPT + DISABLED + 1,
    erasures: erased.map((u) => u.id),
    erasedMember: erased[0].id,
    testGrants,
    webhooks,
    describe: `${FLIPPING} personal flipping, ${KEPT} personal kept by an org grant, ${DISABLED} disabled, 1 org-wide over ${ORG_MEMBERS} members + its admin`,
  };
}
