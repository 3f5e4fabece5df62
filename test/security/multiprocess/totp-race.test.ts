// MF-3 [MP]: a TOTP code and a recovery code are each accepted once, even when the same code is
// presented on two MFA challenges at the same instant on two server processes.
// docs/decisions.md "MFA enrollment": a code is accepted once; the last used time step per identity
// only moves forward (±1 step of drift). Recovery codes are single use and stored as Argon2id hashes salted with the user.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { generate } from 'otplib';
import { Cluster, type Reply } from './cluster.js';
import { Budget, errorCode, expectStatus, loginSettled, mapLimit, seconds, settled, signup, tally, type Account } from './fixtures.js';

/** Catalog: 200 races. Each needs two logins (Argon2id) for two fresh challenges and a fresh time step. */
const TOTP_RACES = Number(process.env.MP_MF3_RACES ?? 200);
/** Users racing side by side: one clock step serves one race of each. */
const USERS = 10;
const RECOVERY_RACES = 5;

interface Enrolled extends Account {
  secret: string;
  recoveryCodes: string[];
}

let cluster: Cluster;
let users: Enrolled[];
before(async () => {
  cluster = await Cluster.start();
  users = await mapLimit(Array.from({ length: USERS }), 4, async (_, i) => {
    const user = await signup(cluster.node(i));
    const secret = expectStatus(await settled(() => cluster.node(i).call('POST', `/v1/users/${user.id}/mfa/totp`, { token: user.access_token })), 200).secret;
    const code = await codeAt(secret, await cluster.now());
    const confirm = await settled(() => cluster.node(i + 1).call('POST', `/v1/users/${user.id}/mfa/totp/confirm`, { token: user.access_token, body: { code } }));
    return { ...user, secret, recoveryCodes: expectStatus(confirm, 200).recovery_codes };
  });
  await cluster.warm(USERS, users[0].access_token);
});
after(() => cluster?.close());

const codeAt = (secret: string, now: Date) => generate({ secret, epoch: Math.floor(now.getTime() / 1000) });

/** Two logins at once, one per process: two MFA challenges for the same user. */
async function twoChallenges(c: Cluster, user: Account): Promise<[string, string]> {
  const replies = await Promise.all([loginSettled(c.a, user.email), loginSettled(c.b, user.email)]);
  return replies.map((r) => {
    const body = expectStatus(r, 200);
    assert.equal(body.mfa_required, true, r.text);
    return body.mfa_token;
  }) as [string, string];
}

const verify = (c: Cluster, node: number, mfaToken: string, proof: { code: string } | { recovery_code: string }) =>
  c.node(node).call('POST', '/v1/auth/mfa/verify', { body: { mfa_token: mfaToken, ...proof } });

/** One race: both challenges verified at once with the same proof, one on each process. */
async function race(c: Cluster, [t1, t2]: [string, string], proof: { code: string } | { recovery_code: string }, flip: boolean): Promise<Reply[]> {
  const sends = [() => verify(c, flip ? 1 : 0, t1, proof), () => verify(c, flip ? 0 : 1, t2, proof)];
  return Promise.all(sends.map((s) => s()));
}

const wellFormedLoss = (r: Reply) => r.status === 401 && errorCode(r) === 'invalid_credentials';

async function sessionsWith(c: Cluster, method: string): Promise<number> {
  const [row] = await c.sql<{ n: number }>('SELECT count(*)::int AS n FROM sessions WHERE user_id = ANY($1) AND $2 = ANY(amr)', [users.map((u) => u.id), method]);
  return row.n;
}

test(`MF-3 the same TOTP code raced on two challenges from two processes is accepted exactly once (up to ${TOTP_RACES} races, ${USERS} users side by side)`, async () => {
  const c = cluster;
  const started = Date.now();
  const budget = new Budget(TOTP_RACES, 20, 30);
  let races = 0;
  const doubles: number[] = [];
  const none: number[] = [];
  const odd: string[] = [];
  for (let round = 0; budget.more(races); round++) {
    // A fresh time step for every round: the shared clock moves 30 s for both processes.
    const now = await c.advanceClock(30);
    const racers = users.slice(0, Math.min(USERS, TOTP_RACES - races));
    const challenges = await mapLimit(racers, 4, (u) => twoChallenges(c, u));
    const codes = await Promise.all(racers.map((u) => codeAt(u.secret, now)));
    // Every user's race at once; each race's two verifications go to different processes.
    const rounds = await Promise.all(racers.map((_, k) => race(c, challenges[k], { code: codes[k] }, (round + k) % 2 === 1)));
    for (const [k, replies] of rounds.entries()) {
      const i = races + k;
      const wins = replies.filter((r) => r.status === 200).length;
      if (wins > 1) doubles.push(i);
      if (wins === 0) none.push(i);
      if (wins === 1 && !replies.some(wellFormedLoss)) odd.push(`#${i}: ${JSON.stringify(tally(replies))} ${replies.map((r) => r.text).join(' | ')}`);
    }
    races += rounds.length;
  }
  const sessions = await sessionsWith(c, 'otp');
  console.log(`[MF-3] TOTP: double-accepts over ${budget.describe(races)} races: ${doubles.length} (races with no winner: ${none.length}; ${seconds(Date.now() - started)} s)`);
  console.log(`[MF-3] TOTP: sessions signed in with otp: ${sessions} (must equal the races with a winner: ${races - none.length})`);
  assert.deepEqual(doubles, [], 'a TOTP code was accepted twice');
  assert.deepEqual(none, [], 'a valid code in a fresh step must win once');
  assert.deepEqual(odd, [], 'the loser gets 401 invalid_credentials');
  assert.equal(sessions, races);
});

test(`MF-3 the same recovery code raced on two challenges from two processes is accepted exactly once (${RECOVERY_RACES} races); codes are stored hashed`, async () => {
  const c = cluster;
  const before = await sessionsWith(c, 'recovery_code');
  const races: Reply[][] = [];
  const user = users[0];
  for (let i = 0; i < RECOVERY_RACES; i++) races.push(await race(c, await twoChallenges(c, user), { recovery_code: user.recoveryCodes[i] }, i % 2 === 1));
  const wins = races.map((replies) => replies.filter((r) => r.status === 200).length);
  const losers = races.flatMap((replies) => replies.filter((r) => r.status !== 200));
  const sessions = (await sessionsWith(c, 'recovery_code')) - before;
  const used = await c.sql<{ n: number }>('SELECT count(*)::int AS n FROM recovery_codes WHERE user_id = $1 AND used_at IS NOT NULL', [user.id]);
  const plaintext = await c.sql(`SELECT 1 FROM recovery_codes r WHERE r::text ILIKE ANY($1)`, [users.flatMap((u) => u.recoveryCodes).map((code) => `%${code}%`)]);
  console.log(`[MF-3] recovery codes: double-accepts over ${RECOVERY_RACES} concurrent races: ${wins.filter((w) => w > 1).length}; winners per race ${wins.join(', ')}`);
  console.log(`[MF-3] recovery codes: used ${used[0].n} of 10, sessions signed in with a recovery code: ${sessions}, plaintext codes in the table: ${plaintext.length}`);
  assert.deepEqual(wins, Array(RECOVERY_RACES).fill(1));
  assert.ok(losers.every(wellFormedLoss), losers.map((r) => `${r.status} ${r.text}`).join('\n'));
  assert.equal(used[0].n, RECOVERY_RACES);
  assert.equal(sessions, RECOVERY_RACES);
  assert.equal(plaintext.length, 0);
});

/** After the tests above: the shared clock stepped back an hour (a process restarted without the development clock's offset, an NTP step). */
const STEPPED_RACES = 3;
test(`MF-3 after the shared clock stepped back an hour, a current TOTP code signs in (not an hour later) and, raced on two challenges from two processes, is accepted exactly once (${STEPPED_RACES} rounds, ${USERS} users side by side)`, async () => {
  const c = cluster;
  await c.sql('UPDATE dev_clock SET offset_ms = offset_ms - 3600000');
  try {
    const wins: number[] = [];
    const odd: string[] = [];
    for (let round = 0; round < STEPPED_RACES; round++) {
      const now = await c.advanceClock(30);
      const challenges = await mapLimit(users, 4, (u) => twoChallenges(c, u));
      const codes = await Promise.all(users.map((u) => codeAt(u.secret, now)));
      const rounds = await Promise.all(users.map((_, k) => race(c, challenges[k], { code: codes[k] }, (round + k) % 2 === 1)));
      for (const replies of rounds) {
        wins.push(replies.filter((r) => r.status === 200).length);
        if (!replies.some(wellFormedLoss)) odd.push(replies.map((r) => `${r.status} ${r.text}`).join(' | '));
      }
    }
    console.log(`[MF-3] TOTP after a step back of an hour: winners per race ${wins.join(', ')}`);
    assert.deepEqual(wins, Array(STEPPED_RACES * USERS).fill(1), 'exactly one winner in every race');
    assert.deepEqual(odd, [], 'the loser gets 401 invalid_credentials');
  } finally {
    await c.sql('UPDATE dev_clock SET offset_ms = offset_ms + 3600000');
  }
});
