// OA-2 [MP]: simultaneous redemptions of one authorization code on two server processes.
// docs/decisions.md "OAuth": a code is used up by one atomic update; a reused code revokes every app
// refresh token issued from that code (audited oauth.authorization_code_reused) and the platform
// session stays. App access tokens are JWTs that expire within 5 minutes (not revocable).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { createHash, randomBytes } from 'node:crypto';
import { Cluster, type Reply } from './cluster.js';
import { adminKey, Budget, errorCode, expectStatus, newApp, rand, REDIRECT, seconds, settled, signup, tally, type Account } from './fixtures.js';

const BURST = 10;
/** The catalog gives no count for the [MP] variant; each run is cheap (no Argon2). */
const RUNS = Number(process.env.MP_OA2_RUNS ?? 50);

let cluster: Cluster;
let app: { id: string };
let member: Account;
before(async () => {
  cluster = await Cluster.start();
  const admin = await adminKey(cluster);
  const owner = await signup(cluster.a);
  app = await newApp(cluster.a, admin, owner.id, { redirect_uris: [REDIRECT] });
  member = await signup(cluster.b);
  const key = `oa2-${rand()}`;
  const grant = () =>
    cluster.a.call('POST', `/v1/users/${member.id}/entitlements`, { token: admin, body: { application_id: app.id, source: 'admin_grant' }, headers: { 'idempotency-key': key } });
  expectStatus(await settled(grant), 201);
  await cluster.warm(BURST / 2, member.access_token);
});
after(() => cluster?.close());

async function newCode(c: Cluster, node: number): Promise<{ code: string; verifier: string }> {
  const verifier = randomBytes(32).toString('base64url');
  const challenge = createHash('sha256').update(verifier).digest('base64url');
  const send = () =>
    c.node(node).call('POST', '/v1/auth/oauth/authorization-codes', {
      token: member.access_token,
      body: { application_id: app.id, redirect_uri: REDIRECT, code_challenge: challenge, code_challenge_method: 'S256' },
    });
  const body = expectStatus(await settled(send), 201);
  return { code: body.code, verifier };
}

const token = (c: Cluster, node: number, body: Record<string, string>) => c.node(node).call('POST', '/v1/auth/oauth/token', { body });
const invalidGrant = (r: Reply) => r.status === 400 && errorCode(r) === 'invalid_grant';

test(`OA-2 ${BURST} simultaneous redemptions of one authorization code on two processes: one success, and the replays revoke its refresh token (up to ${RUNS} runs)`, async () => {
  const c = cluster;
  const budget = new Budget(RUNS, 10, 15);
  const started = Date.now();
  const extra: string[] = [];
  const survived: number[] = [];
  let revoked = 0;
  let runs = 0;
  while (budget.more(runs)) {
    const i = runs++;
    const { code, verifier } = await newCode(c, i);
    const grant = { grant_type: 'authorization_code', code, code_verifier: verifier, redirect_uri: REDIRECT, client_id: app.id };
    const redemptions = Array.from({ length: BURST }, (_, k) => () => token(c, k, grant));
    const replies = await Promise.all(redemptions.map((r) => r()));
    const wins = replies.filter((r) => r.status === 200);
    if (wins.length !== 1 || !replies.filter((r) => r.status !== 200).every(invalidGrant)) {
      extra.push(`run ${i}: ${JSON.stringify(tally(replies))}`);
      continue;
    }
    // The first redemption's refresh token was revoked by the concurrent replays.
    const refreshed = await token(c, i + 1, { grant_type: 'refresh_token', refresh_token: wins[0].json().refresh_token, client_id: app.id });
    if (invalidGrant(refreshed)) revoked++;
    else survived.push(i);
  }
  const audits = await c.sql<{ n: number }>(
    `SELECT count(*)::int AS n FROM audit_events WHERE action = 'oauth.authorization_code_reused' AND target_user_id = $1`,
    [member.id],
  );
  // The platform session of the user is not touched by an Application's replayed code.
  const platform = await c.a.call('GET', '/v1/users/me', { token: member.access_token });

  console.log(`[OA-2] extra successes: ${extra.length} runs with ≠1 success over ${budget.describe(runs)} runs × ${BURST} redemptions (${BURST / 2} per process), ${seconds(Date.now() - started)} s`);
  console.log(`[OA-2] tokens revoked on replay: refresh tokens ${revoked} / ${runs - extra.length}; app access tokens: not revocable (JWT, expires_in 300 s, docs/decisions.md "Replays")`);
  console.log(`[OA-2] oauth.authorization_code_reused audit events: ${audits[0].n} (one per code: ${runs}); platform session after the replays: ${platform.status}`);
  assert.deepEqual(extra, []);
  assert.deepEqual(survived, [], 'a refresh token issued from a replayed code still worked');
  assert.equal(audits[0].n, runs);
  assert.equal(platform.status, 200);
});
