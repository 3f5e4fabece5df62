// Runs on the Argon2 pool's threads (src/auth/passwords.ts): the synchronous calls do the hashing on
// this thread, off the event loop and off libuv's pool.
import { hashSync, verifySync, type Options } from '@node-rs/argon2';

export type Argon2Task = { op: 'hash'; password: string; options: Options } | { op: 'verify'; hash: string; password: string };

export default function run(task: Argon2Task): string | boolean {
  if (task.op === 'hash') return hashSync(task.password, task.options);
  try {
    return verifySync(task.hash, task.password);
  } catch {
    // A malformed stored hash verifies nothing.
    return false;
  }
}
