// Preloaded into every server process the [MP] harness starts (node --import), like orphan-guard.mjs:
// counts the Argon2 password evaluations of this process (AU-4). Every verification is a task the
// service submits to its Argon2 pool (src/auth/passwords.ts), so the count is the pool's verify tasks,
// written to MP_ARGON2_COUNT_FILE on each one for the test process to read. The service is unchanged.
// Node preloads this module into every worker thread too (the pool's threads inherit --import): only
// the main thread counts, or a pool thread starting late would write its '0' over the count.
import { writeFileSync } from 'node:fs';
import { isMainThread } from 'node:worker_threads';
import { Piscina } from 'piscina';

const file = process.env.MP_ARGON2_COUNT_FILE;
if (file && isMainThread) {
  let evaluations = 0;
  writeFileSync(file, '0');
  const realRun = Piscina.prototype.run;
  Piscina.prototype.run = function run(task, ...rest) {
    if (task?.op === 'verify') writeFileSync(file, String(++evaluations));
    return realRun.call(this, task, ...rest);
  };
}
