// Issue 3: login is bounded by Argon2id and "the hashing runs off the event loop so other requests
// keep flowing". The hashes run on a pool of their own, scheduled below the event loop (nice(2),
// Linux: /proc shows each thread's nice value).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { post } from './support.js';
import { ARGON2_NICE_INCREMENT } from '../../src/auth/passwords.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

/** nice value and CPU ticks of every thread of this process (fields 14, 15 and 19 of /proc/…/stat). */
function threads(): { tid: number; nice: number; ticks: number }[] {
  return readdirSync('/proc/self/task').map((tid) => {
    const fields = readFileSync(`/proc/self/task/${tid}/stat`, 'utf8').replace(/^.*\) /, '').split(' ');
    return { tid: Number(tid), nice: Number(fields[16]), ticks: Number(fields[11]) + Number(fields[12]) };
  });
}

test('Argon2id runs on threads of their own, scheduled below the event loop, and signup and login work through them', async () => {
  const email = uniqueEmail('pool');
  assert.equal((await post(t, '/v1/auth/signup', { email, password: PASSWORD })).statusCode, 201);
  assert.equal((await post(t, '/v1/auth/login', { email, password: PASSWORD })).statusCode, 200);
  assert.equal((await post(t, '/v1/auth/login', { email, password: `${PASSWORD}x` })).statusCode, 401);

  const mainNice = threads().find((th) => th.tid === process.pid)!.nice;
  const hashing = threads().filter((th) => th.nice > mainNice);
  assert.ok(hashing.length >= 1, `no thread below the event loop: ${JSON.stringify(threads())}`);
  assert.deepEqual([...new Set(hashing.map((th) => th.nice - mainNice))], [ARGON2_NICE_INCREMENT]);
  // Three hashes (about 10 ms of CPU each) ran on those threads, not on the event loop.
  assert.ok(hashing.reduce((sum, th) => sum + th.ticks, 0) >= 1, JSON.stringify(hashing));
});
