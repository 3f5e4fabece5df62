// Its own file, so that its sign-ins are the first of a process: the unknown-email path must cost what
// a wrong password costs from the very first failure on, before any other sign-in warmed anything up.
import { argon2Hashes, passwordEvaluations } from '../security/core/argon2-probe.js';
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { createUser, PASSWORD, uniqueEmail } from '../helpers/fixtures.js';
import { assertError, post } from './support.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

test('the first unknown-email login of a process takes the same Argon2 work as a wrong password, one verification and no hash: the timing tells nothing about which addresses have accounts, even right after a start', async () => {
  const known = await createUser(t);
  const work = async (email: string, password: string) => {
    const [hashes, verifications] = [argon2Hashes(), passwordEvaluations()];
    assertError(await post(t, '/v1/auth/login', { email, password }), 401, 'invalid_credentials');
    return { hashes: argon2Hashes() - hashes, verifications: passwordEvaluations() - verifications };
  };
  assert.deepEqual(await work(uniqueEmail('first-unknown'), PASSWORD), { hashes: 0, verifications: 1 }, 'the first unknown email');
  assert.deepEqual(await work(known.email, 'not-the-password-99'), { hashes: 0, verifications: 1 }, 'a wrong password');
  assert.deepEqual(await work(uniqueEmail('second-unknown'), PASSWORD), { hashes: 0, verifications: 1 }, 'a later unknown email');
});
