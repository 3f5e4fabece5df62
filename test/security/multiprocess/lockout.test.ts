// AU-4 [MP]: the per-account lockout holds when the guesses are spread over two server processes
// and when they arrive in parallel. docs/decisions.md "Throttles": any 5 failures in a rolling 15
// minutes lock the password identity for 15 minutes (429 too_many_attempts with Retry-After), the
// correct password included. Catalog [DEC]: an unknown email behaves like a known one after 5 tries.
//
// "Password evaluations" are counted two ways. The answers: each wrong guess evaluated before the
// lock answers 401, the one that sets the lock and every later one 429. But a guess evaluated after
// the lock was set also answers 429, so under parallelism the answers cannot show extra evaluations;
// the CPU time of the two processes (/proc, all threads) can: one Argon2id verify (m=19 MiB, t=2)
// costs far more than the rest of a request. The same burst against distinct unknown emails (one
// evaluation each, against the dummy hash) and a burst the lock refuses entirely calibrate the
// estimate under the same parallelism (see parallel()). Processes run with WORKERS=0, so nothing
// else uses their CPU. Fewer parallel hashes cost less each, so the estimate of a correct service
// reads low (about 2–4 for 5); the broken one reads 12–15 for 20. The bound is < 7.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, MP_SKIP, type Reply } from './cluster.js';
import { errorCode, login, outcome, signup, tally, uniqueEmail, WRONG_PASSWORD } from './fixtures.js';

const THRESHOLD = 5;
const PARALLEL = 20;
const FAILED = '401 invalid_credentials';
const LOCKED = '429 too_many_attempts';

let cluster: Cluster;
before(async () => {
  if (MP_SKIP) return;
  cluster = await Cluster.start();
  await cluster.warm(PARALLEL / 2, (await signup(cluster.a)).access_token);
});
after(() => cluster?.close());

const cpu = (c: Cluster) => c.nodes.reduce((sum, n) => sum + n.cpuMs(), 0);

async function cpuOf(c: Cluster, fn: () => Promise<unknown>): Promise<number> {
  const start = cpu(c);
  await fn();
  return cpu(c) - start;
}

/** CPU of PARALLEL wrong guesses for distinct unknown emails, fired like the guesses: PARALLEL evaluations. */
async function referenceBurst(c: Cluster): Promise<number> {
  const emails = Array.from({ length: PARALLEL }, () => uniqueEmail('reference'));
  return cpuOf(c, async () => {
    const replies = await Promise.all(emails.map((email, i) => login(c.node(i), email, WRONG_PASSWORD)));
    assert.deepEqual(tally(replies), { [FAILED]: PARALLEL });
  });
}

const isLocked = (r: Reply) => r.status === 429 && errorCode(r) === 'too_many_attempts' && Number(r.headers['retry-after']) > 0;

/** Sequential wrong guesses alternating between the processes, then three more (the last two with the correct password). */
async function alternating(c: Cluster, email: string): Promise<{ answers: string[]; after: Reply[] }> {
  const answers: string[] = [];
  for (let i = 0; i < THRESHOLD; i++) answers.push(outcome(await login(c.node(i), email, WRONG_PASSWORD)));
  const after = [await login(c.b, email, WRONG_PASSWORD), await login(c.a, email), await login(c.b, email)];
  return { answers, after };
}

const guessBurst = (c: Cluster, email: string) =>
  Promise.all(Array.from({ length: PARALLEL }, (_, i) => () => login(c.node(i), email, WRONG_PASSWORD)).map((send) => send()));

/**
 * PARALLEL wrong guesses at once, half on each process; then PARALLEL more (the lock refuses all of
 * them: the CPU of a burst without evaluations); then the correct password on both processes.
 * With o the CPU of a request around the hash and e of one evaluation: reference = P·(e + o),
 * refused = P·o, guesses = n·e + P·o, so n = P·(guesses − refused) / (reference − refused).
 */
async function parallel(c: Cluster, email: string): Promise<{ answers: Record<string, number>; refused: Record<string, number>; after: Reply[]; evaluations: number }> {
  const referenceMs = await referenceBurst(c);
  let replies: Reply[] = [];
  const guessesMs = await cpuOf(c, async () => {
    replies = await guessBurst(c, email);
  });
  let refused: Reply[] = [];
  const refusedMs = await cpuOf(c, async () => {
    refused = await guessBurst(c, email);
  });
  const after = [await login(c.a, email), await login(c.b, email)];
  const evaluations = (PARALLEL * (guessesMs - refusedMs)) / (referenceMs - refusedMs);
  return { answers: tally(replies), refused: tally(refused), after, evaluations };
}


test('AU-4 failures alternating between two processes lock after exactly 5 password evaluations; then even the correct password gets 429', { skip: MP_SKIP }, async () => {
  const user = await signup(cluster.a);
  const run = await alternating(cluster, user.email);
  console.log(`[AU-4] alternating A/B: answers ${run.answers.join(', ')}; then ${run.after.map(outcome).join(', ')} (wrong, correct on A, correct on B)`);
  // Sequential guesses cannot overlap: the first five are evaluated (the 5th sets the lock, so it may
  // answer 429 already); the 6th and later find the lock before any evaluation.
  console.log(`[AU-4] alternating A/B: password evaluations before lock: ${run.answers.length} (must be 5)`);
  assert.deepEqual(run.answers.slice(0, THRESHOLD - 1), Array(THRESHOLD - 1).fill(FAILED));
  assert.ok([FAILED, LOCKED].includes(run.answers[THRESHOLD - 1]), run.answers[THRESHOLD - 1]);
  for (const r of run.after) assert.ok(isLocked(r), `locked: ${r.node} ${r.status} ${JSON.stringify(r.headers['retry-after'])} ${r.text}`);
});

test(`AU-4 ${PARALLEL} parallel wrong guesses split across two processes get exactly 5 password evaluations, then the lock holds`, { skip: MP_SKIP }, async () => {
  const user = await signup(cluster.a);
  const run = await parallel(cluster, user.email);
  console.log(`[AU-4] ${PARALLEL} parallel guesses (${PARALLEL / 2} per process): answers ${JSON.stringify(run.answers)}; ${PARALLEL} more: ${JSON.stringify(run.refused)}; then correct password: ${run.after.map(outcome).join(', ')}`);
  console.log(`[AU-4] ${PARALLEL} parallel guesses: password evaluations before lock under parallelism: ≈${run.evaluations.toFixed(1)} (CPU estimate, reads low; must be at most 5)`);
  for (const r of run.after) assert.ok(isLocked(r), `locked: ${r.node} ${r.status} ${r.text}`);
  assert.deepEqual(run.refused, { [LOCKED]: PARALLEL });
  assert.deepEqual(Object.keys(run.answers).filter((a) => a !== FAILED && a !== LOCKED), [], 'only 401 and 429 answers');
  assert.ok((run.answers[FAILED] ?? 0) <= THRESHOLD, `${run.answers[FAILED]} failures answered 401 before the lock`);
  assert.ok(run.evaluations < THRESHOLD + 2, `${PARALLEL} parallel guesses were given about ${run.evaluations.toFixed(1)} password evaluations; the lock must cap them at ${THRESHOLD}`);
});

test('AU-4 an unknown email answers like a known account after 5 tries, sequential and parallel (no enumeration oracle)', { skip: MP_SKIP }, async () => {
  const known = [await signup(cluster.a), await signup(cluster.b)];
  const knownSequential = await alternating(cluster, known[0].email);
  const unknownSequential = await alternating(cluster, uniqueEmail('nobody'));
  const knownBurst = await parallel(cluster, known[1].email);
  const unknownBurst = await parallel(cluster, uniqueEmail('nobody'));
  const answers = (run: { answers: string[]; after: Reply[] }) => [...run.answers, ...run.after.map(outcome)];
  console.log(`[AU-4] alternating A/B, known account: ${answers(knownSequential).join(', ')}`);
  console.log(`[AU-4] alternating A/B, unknown email: ${answers(unknownSequential).join(', ')}`);
  console.log(`[AU-4] ${PARALLEL} parallel guesses, ${PARALLEL} more, then 2, known account: ${JSON.stringify(knownBurst.answers)}, ${JSON.stringify(knownBurst.refused)}, ${knownBurst.after.map(outcome).join(', ')}`);
  console.log(`[AU-4] ${PARALLEL} parallel guesses, ${PARALLEL} more, then 2, unknown email: ${JSON.stringify(unknownBurst.answers)}, ${JSON.stringify(unknownBurst.refused)}, ${unknownBurst.after.map(outcome).join(', ')}`);
  assert.deepEqual(answers(unknownSequential), answers(knownSequential), 'an unknown email must answer like a known account');
  assert.deepEqual([unknownBurst.refused, unknownBurst.after.map(outcome)], [knownBurst.refused, knownBurst.after.map(outcome)], 'after a parallel burst an unknown email must be locked like a known account');
  for (const r of [...unknownSequential.after, ...unknownBurst.after]) assert.ok(isLocked(r), `Retry-After on ${r.node}: ${r.status} ${r.text}`);
});
