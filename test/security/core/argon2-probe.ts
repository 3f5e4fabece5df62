// Counts Argon2 password evaluations (AU-4). Import it FIRST in a test file: it wraps verify on the
// CommonJS exports of @node-rs/argon2 before src/auth/passwords.ts imports (and binds) it.
import { createRequire } from 'node:module';

const require = createRequire(import.meta.url);
const argon2 = require('@node-rs/argon2') as { verify: (...args: unknown[]) => Promise<boolean> };
const realVerify = argon2.verify;
let evaluations = 0;
argon2.verify = (...args: unknown[]) => {
  evaluations++;
  return realVerify(...args);
};

/** Argon2 verifications run in this process so far (known accounts and the unknown-email dummy alike). */
export const passwordEvaluations = (): number => evaluations;
