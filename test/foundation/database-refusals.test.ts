// A database that refuses work answers 503 service_unavailable with Retry-After, never 500: here the
// server's "sorry, too many clients already" (53300 too_many_connections), which a PostgreSQL at its
// max_connections sends to every new connection (catalog 16.5.3: degrade gracefully when a
// dependency fails). The refusal is injected at the database handle, the way pg reports it.
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { buildTestApp, type TestApp } from '../helpers/app.js';
import { userToken } from '../helpers/fixtures.js';
import type { Database, Scope } from '../../src/db/types.js';

let t: TestApp;
before(async () => {
  t = await buildTestApp();
});
after(() => t.close());

/** Every statement on `database` fails as pg fails a connection the server turned away. */
function refuseConnections(database: Database): () => void {
  const original = database.scoped;
  const refusal = () => Object.assign(new Error('sorry, too many clients already'), { code: '53300', severity: 'FATAL' });
  database.scoped = (scope: Scope) => {
    const db = original.call(database, scope);
    return { ...db, query: async () => { throw refusal(); }, transaction: async () => { throw refusal(); } } as typeof db;
  };
  return () => {
    database.scoped = original;
  };
}

test('a database at its connection limit (53300 too_many_connections) gets 503 service_unavailable with Retry-After on reads and sign-ins, not 500; served again once it takes connections', async () => {
  const { user, token } = await userToken(t);
  const { email, password } = user;
  const restore = refuseConnections(t.database);
  try {
    for (const res of [
      await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { authorization: `Bearer ${token}` } }),
      await t.app.inject({ method: 'POST', url: '/v1/auth/login', payload: { email, password } }),
    ]) {
      assert.equal(res.statusCode, 503, res.body);
      assert.equal(res.json().error.code, 'service_unavailable');
      assert.ok(Number(res.headers['retry-after']) > 0, 'Retry-After');
    }
  } finally {
    restore();
  }
  assert.equal((await t.app.inject({ method: 'GET', url: '/v1/users/me', headers: { authorization: `Bearer ${token}` } })).statusCode, 200);
});
