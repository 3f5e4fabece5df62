// Counts Argon2 work (AU-4, and the recovery codes a TOTP confirm hashes): every verification and
// every hash is a task submitted to the Argon2 pool of src/auth/passwords.ts, so the probe counts the
// pool's tasks by kind.
import { Piscina } from 'piscina';

const tasks = { verify: 0, hash: 0 };
/** The Argon2 parameters (`$argon2id$v=19$m=…,t=…,p=…`) of each hash verified, in order. */
const verified: string[] = [];
/** The parameters part of an encoded Argon2 hash: `$argon2id$v=19$m=…,t=…,p=…`. */
export const argon2Parameters = (hash: string): string => hash.split('$').slice(0, 4).join('$');

const realRun = Piscina.prototype.run;
Piscina.prototype.run = function run(this: Piscina, task: unknown, ...rest: unknown[]) {
  const op = (task as { op?: string } | null)?.op;
  if (op === 'verify' || op === 'hash') tasks[op]++;
  if (op === 'verify') verified.push(argon2Parameters(String((task as { hash?: unknown }).hash)));
  return (realRun as (...args: unknown[]) => Promise<unknown>).call(this, task, ...rest);
} as typeof realRun;

/** Argon2 verifications run in this process so far (known accounts and the unknown-email dummy alike). */
export const passwordEvaluations = (): number => tasks.verify;

/** Argon2 hashes (not verifications) run in this process so far. */
export const argon2Hashes = (): number => tasks.hash;

/** The Argon2 parameters of the hashes verified from the `from`-th verification on (a cheaper dummy shows here). */
export const verifiedParameters = (from = 0): string[] => verified.slice(from);
