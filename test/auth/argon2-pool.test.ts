// Issue 3: login is bounded by Argon2id and "the hashing runs off the event loop so other requests
// keep flowing". The hashes run on a thread pool of their own (src/auth/passwords.ts).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { post } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

test('Argon2id runs off the event loop: requests keep being answered while sign-ins hash', async () => {
  const email = uniqueEmail('pool');
  assert.equal((await post(t, '/v1/auth/signup', { email, password: PASSWORD })).statusCode, 201);

  // Four sign-ins (four Argon2id verifications) in flight; meanwhile GET /health is asked again and
  // again. Were the hash on the event loop, no answer could come before the sign-ins are done.
  let signInsDone = false;
  const signIns = Promise.all([0, 1, 2, 3].map((i) => post(t, '/v1/auth/login', { email, password: i % 2 ? PASSWORD : `${PASSWORD}x` }))).then((all) => {
    signInsDone = true;
    return all;
  });
  let answeredMeanwhile = 0;
  while (!signInsDone) {
    await new Promise((resolve) => setImmediate(resolve));
    const res = await t.app.inject({ method: 'GET', url: '/health' });
    assert.equal(res.statusCode, 200);
    if (!signInsDone) answeredMeanwhile++;
  }
  assert.deepEqual((await signIns).map((r) => r.statusCode), [401, 200, 401, 200]);
  assert.ok(answeredMeanwhile >= 3, `GET /health answered ${answeredMeanwhile} times while four sign-ins hashed`);
});
