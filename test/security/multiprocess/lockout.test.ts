// AU-4 [MP]: the per-account lockout holds when the guesses are spread over two server processes
// and when they arrive in parallel. docs/decisions.md "Throttles": any 5 failures in a rolling 15
// minutes lock the password identity for 15 minutes (429 too_many_attempts with Retry-After), the
// correct password included. Catalog [DEC]: an unknown email behaves like a known one after 5 tries.
//
// "Password evaluations" are counted two ways. The answers: each wrong guess evaluated answers 401,
// the fifth (which sets the lock) included, and every later one 429. But the answers alone cannot
// show an evaluation that should not have happened.
// So each server process also counts the Argon2 verifications it starts (argon2-count.mjs, preloaded
// by the harness: the pool's verify tasks, the unknown-email dummy included), and the test adds up
// both processes' counts around each burst.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster, type Reply } from './cluster.js';
import { errorCode, login, outcome, signup, tally, uniqueEmail, WRONG_PASSWORD } from './fixtures.js';

const THRESHOLD = 5;
const PARALLEL = 20;
const FAILED = '401 invalid_credentials';
const LOCKED = '429 too_many_attempts';

let cluster: Cluster;
before(async () => {
  cluster = await Cluster.start();
  await cluster.warm(PARALLEL / 2, (await signup(cluster.a)).access_token);
});
after(() => cluster?.close());

/** Argon2 verifications both processes have started so far. */
const evaluationCount = (c: Cluster) => c.nodes.reduce((sum, n) => sum + n.argon2Evaluations(), 0);

async function evaluationsOf<T>(c: Cluster, fn: () => Promise<T>): Promise<{ result: T; evaluations: number }> {
  const start = evaluationCount(c);
  const result = await fn();
  return { result, evaluations: evaluationCount(c) - start };
}

const isLocked = (r: Reply) => r.status === 429 && errorCode(r) === 'too_many_attempts' && Number(r.headers['retry-after']) > 0;

/** Sequential wrong guesses alternating between the processes, then three more (the last two with the correct password). */
async function alternating(c: Cluster, email: string): Promise<{ answers: string[]; after: Reply[]; evaluations: number }> {
  const answers: string[] = [];
  const { result: after, evaluations } = await evaluationsOf(c, async () => {
    for (let i = 0; i < THRESHOLD; i++) answers.push(outcome(await login(c.node(i), email, WRONG_PASSWORD)));
    return [await login(c.b, email, WRONG_PASSWORD), await login(c.a, email), await login(c.b, email)];
  });
  return { answers, after, evaluations };
}

const guessBurst = (c: Cluster, email: string) =>
  Promise.all(Array.from({ length: PARALLEL }, (_, i) => () => login(c.node(i), email, WRONG_PASSWORD)).map((send) => send()));

/**
 * PARALLEL wrong guesses at once, half on each process; then PARALLEL more (the lock refuses all of
 * them); then the correct password on both processes. `evaluations` counts the Argon2 verifications
 * of all of it.
 */
async function parallel(c: Cluster, email: string): Promise<{ answers: Record<string, number>; refused: Record<string, number>; after: Reply[]; evaluations: number }> {
  const { result, evaluations } = await evaluationsOf(c, async () => {
    const replies = await guessBurst(c, email);
    const refused = await guessBurst(c, email);
    const after = [await login(c.a, email), await login(c.b, email)];
    return { answers: tally(replies), refused: tally(refused), after };
  });
  return { ...result, evaluations };
}

test('AU-4 failures alternating between two processes lock after exactly 5 password evaluations; then even the correct password gets 429', async () => {
  const user = await signup(cluster.a);
  const run = await alternating(cluster, user.email);
  console.log(`[AU-4] alternating A/B: answers ${run.answers.join(', ')}; then ${run.after.map(outcome).join(', ')} (wrong, correct on A, correct on B)`);
  // Sequential guesses cannot overlap: the first five are evaluated and answered 401 (the 5th sets
  // the lock); the 6th and later find the lock before any evaluation.
  console.log(`[AU-4] alternating A/B: password evaluations: ${run.evaluations} (must be 5)`);
  assert.equal(run.evaluations, THRESHOLD, 'password evaluations of the 5 guesses and the 3 requests after them');
  assert.deepEqual(run.answers.slice(0, THRESHOLD), Array(THRESHOLD).fill(FAILED));
  for (const r of run.after) assert.ok(isLocked(r), `locked: ${r.node} ${r.status} ${JSON.stringify(r.headers['retry-after'])} ${r.text}`);
});

test(`AU-4 ${PARALLEL} parallel wrong guesses split across two processes get exactly 5 password evaluations, then the lock holds`, async () => {
  const user = await signup(cluster.a);
  const run = await parallel(cluster, user.email);
  console.log(`[AU-4] ${PARALLEL} parallel guesses (${PARALLEL / 2} per process): answers ${JSON.stringify(run.answers)}; ${PARALLEL} more: ${JSON.stringify(run.refused)}; then correct password: ${run.after.map(outcome).join(', ')}`);
  console.log(`[AU-4] ${PARALLEL} parallel guesses: password evaluations under parallelism: ${run.evaluations} (must be 5)`);
  for (const r of run.after) assert.ok(isLocked(r), `locked: ${r.node} ${r.status} ${r.text}`);
  assert.deepEqual(run.refused, { [LOCKED]: PARALLEL });
  assert.deepEqual(Object.keys(run.answers).filter((a) => a !== FAILED && a !== LOCKED), [], 'only 401 and 429 answers');
  assert.ok((run.answers[FAILED] ?? 0) <= THRESHOLD, `${run.answers[FAILED]} failures answered 401 before the lock`);
  assert.equal(run.evaluations, THRESHOLD, `${2 * PARALLEL + 2} requests were given ${run.evaluations} password evaluations; the lock must cap them at ${THRESHOLD}`);
});

test('AU-4 an unknown email answers like a known account after 5 tries, sequential and parallel (no enumeration oracle)', async () => {
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
  console.log(`[AU-4] password evaluations, sequential / parallel: known ${knownSequential.evaluations} / ${knownBurst.evaluations}, unknown ${unknownSequential.evaluations} / ${unknownBurst.evaluations}`);
  assert.deepEqual(answers(unknownSequential), answers(knownSequential), 'an unknown email must answer like a known account');
  assert.deepEqual([unknownSequential.evaluations, unknownBurst.evaluations], [knownSequential.evaluations, knownBurst.evaluations], 'an unknown email must cost the same password evaluations as a known account');
  assert.deepEqual([unknownBurst.refused, unknownBurst.after.map(outcome)], [knownBurst.refused, knownBurst.after.map(outcome)], 'after a parallel burst an unknown email must be locked like a known account');
  for (const r of [...unknownSequential.after, ...unknownBurst.after]) assert.ok(isLocked(r), `Retry-After on ${r.node}: ${r.status} ${r.text}`);
});
