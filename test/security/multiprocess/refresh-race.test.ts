// TK-4 / TK-5 [MP]: refresh-token rotation on two server processes sharing one PostgreSQL.
// docs/decisions.md "Refresh reuse": presenting a used refresh token revokes the whole session and
// is audited session.refresh_token_reused; of concurrent refreshes with one token exactly one wins,
// the others count as reuse, so the session ends (no grace period).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, type Reply } from './cluster.js';
import { Budget, errorCode, expectStatus, loginSettled, mapLimit, seconds, signup, tally } from './fixtures.js';

/** Catalog: 200 iterations of 20 requests. Each costs one login (Argon2id) to make a fresh session. */
const ITERATIONS = Number(process.env.MP_TK5_ITERATIONS ?? 200);
const BURST = 20;
const CHUNK = 10;

let cluster: Cluster;
before(async () => {
  cluster = await Cluster.start();
});
after(() => cluster?.close());

const refresh = (c: Cluster, node: number, token: string) => c.node(node).call('POST', '/v1/auth/token/refresh', { body: { refresh_token: token } });
const me = (c: Cluster, node: number, token: string) => c.node(node).call('GET', '/v1/users/me', { token });
const isInvalidRefresh = (r: Reply) => r.status === 401 && errorCode(r) === 'invalid_refresh_token';

test('TK-4 sequential rotation rtk1→rtk2 then rtk1 again on the other process revokes the whole session and only it', async () => {
  const c = cluster;
  const acct = await signup(c.a);
  const other = expectStatus(await loginSettled(c.b, acct.email), 200); // a second session of the same user

  const rotated = expectStatus(await refresh(c, 0, acct.refresh_token), 200);
  assert.equal(rotated.session_id, acct.session_id);
  expectStatus(await me(c, 1, rotated.access_token), 200);

  const reuse = await refresh(c, 1, acct.refresh_token);
  assert.ok(isInvalidRefresh(reuse), `reuse of rtk1: ${reuse.status} ${reuse.text}`);
  const rtk2 = await refresh(c, 0, rotated.refresh_token);
  assert.ok(isInvalidRefresh(rtk2), `rtk2 after the reuse: ${rtk2.status} ${rtk2.text}`);
  for (const [i, token] of [acct.access_token, rotated.access_token].entries()) {
    const res = await me(c, i, token);
    assert.equal(res.status, 401, `an access token of the revoked session still works: ${res.text}`);
  }
  const [session] = await c.sql('SELECT revoked_at FROM sessions WHERE id = $1', [acct.session_id]);
  assert.ok(session.revoked_at, 'the session is revoked');
  const audit = await c.sql(`SELECT actor_type FROM audit_events WHERE action = 'session.refresh_token_reused' AND target_id = $1`, [acct.session_id]);
  assert.deepEqual(audit.map((a) => a.actor_type), ['system']);

  // The user's other session is not touched by the reuse.
  expectStatus(await me(c, 0, other.access_token), 200);
  expectStatus(await refresh(c, 0, other.refresh_token), 200);
  console.log('[TK-4] sessions revoked on reuse: 1 / 1 (rtk2 and both access tokens refused; the other session of the user kept working)');
});

test(`TK-5 concurrent refresh across two processes gives exactly one winner per iteration (${BURST} requests, up to ${ITERATIONS} iterations)`, async () => {
  const c = cluster;
  const acct = await signup(c.a);
  await c.warm(BURST, acct.access_token);
  const budget = new Budget(ITERATIONS, 20, 30);
  const started = Date.now();
  const ids: string[] = [];
  const badIterations: string[] = [];
  let winnersAlive = 0;
  while (budget.more(ids.length)) {
    // Fresh sessions through real logins on both processes, a chunk at a time.
    const sessions = await mapLimit(Array.from({ length: Math.min(CHUNK, ITERATIONS - ids.length) }), 4, async (_, k) =>
      expectStatus(await loginSettled(c.node(k), acct.email), 200),
    );
    for (const s of sessions) {
      const i = ids.length;
      ids.push(s.session_id);
      // The barrier: every request is built first, then all are released at once, alternating processes.
      const burst = Array.from({ length: BURST }, (_, k) => () => refresh(c, k, s.refresh_token));
      const replies = await Promise.all(burst.map((send) => send()));
      const winners = replies.filter((r) => r.status === 200);
      const losers = replies.filter((r) => r.status !== 200);
      if (winners.length !== 1 || !losers.every(isInvalidRefresh)) {
        badIterations.push(`#${i}: ${JSON.stringify(tally(replies))}`);
        continue;
      }
      // The decision: the losers count as reuse, so even the winner's new tokens are dead.
      const won = winners[0].json();
      const [again, access] = await Promise.all([refresh(c, i + 1, won.refresh_token), me(c, i, won.access_token)]);
      if (!isInvalidRefresh(again) || access.status !== 401) winnersAlive++;
    }
  }
  const elapsed = Date.now() - started;

  const children = await c.sql<{ session_id: string; n: number }>(
    `SELECT session_id, count(*)::int AS n FROM refresh_tokens WHERE session_id = ANY($1) AND parent_id IS NOT NULL GROUP BY session_id`,
    [ids],
  );
  const childCount = new Map(children.map((r) => [r.session_id, r.n]));
  const wrongChildren = ids.filter((id) => childCount.get(id) !== 1);
  const audits = await c.sql<{ target_id: string; n: number }>(
    `SELECT target_id, count(*)::int AS n FROM audit_events WHERE action = 'session.refresh_token_reused' AND target_id = ANY($1) GROUP BY target_id`,
    [ids],
  );
  const wrongAudits = ids.length - audits.filter((a) => a.n === 1).length;

  console.log(`[TK-5] iterations with ≠1 success: ${badIterations.length} / ${budget.describe(ids.length)} (${BURST} requests per iteration, ${BURST / 2} per process; ${seconds(elapsed)} s with the logins)`);
  console.log(`[TK-5] sessions without exactly one child refresh-token row: ${wrongChildren.length}`);
  console.log(`[TK-5] winners whose new tokens still worked after the race: ${winnersAlive} (decision: concurrent reuse ends the session)`);
  console.log(`[TK-5] sessions without exactly one session.refresh_token_reused audit event: ${wrongAudits}`);
  assert.deepEqual(badIterations, []);
  assert.deepEqual(wrongChildren, []);
  assert.equal(winnersAlive, 0);
  assert.equal(wrongAudits, 0);
});
