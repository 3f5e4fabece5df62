// Counts Argon2 password evaluations (AU-4): every verification is a task submitted to the Argon2
// pool of src/auth/passwords.ts, so the probe counts the pool's verify tasks.
import { Piscina } from 'piscina';

let evaluations = 0;
const realRun = Piscina.prototype.run;
Piscina.prototype.run = function run(this: Piscina, task: unknown, ...rest: unknown[]) {
  if ((task as { op?: string } | null)?.op === 'verify') evaluations++;
  return (realRun as (...args: unknown[]) => Promise<unknown>).call(this, task, ...rest);
} as typeof realRun;

/** Argon2 verifications run in this process so far (known accounts and the unknown-email dummy alike). */
export const passwordEvaluations = (): number => evaluations;
