// The baseline: a bare Fastify server doing the minimum work a route of the same kind needs, on the
// same database as the service. Forked by run.mjs; gets its setup over IPC and answers with its port.
//
//   GET  /jwt-select     RS256 bearer JWT verified with jose against the service's JWKS
//                        (issuer, audience, exp), then SELECT id, email FROM users WHERE id = $1.
//   POST /argon2-select  {email, password}: one indexed SELECT of the user and its password hash by
//                        lower(email), then an Argon2id verify (@node-rs/argon2) of that hash.
//   GET  /select?id=…    one indexed SELECT by primary key, nothing else (no credential).
//   POST /argon2-loop    {seconds, threads}: bare loops of Argon2id verifications of one hash at the
//                        service's parameters, one thread per core (or `threads`), for `seconds`;
//                        answers {verifications, seconds, threads}. No HTTP or SQL per verification.
import Fastify from 'fastify';
import pg from 'pg';
import { createLocalJWKSet, jwtVerify } from 'jose';
import { Algorithm, hash, verify } from '@node-rs/argon2';
import { randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';

/** The service's password parameters (src/auth/passwords.ts): Argon2id, 19456 KiB, t=2, p=1. */
export const ARGON2 = { algorithm: Algorithm.Argon2id, memoryCost: 19456, timeCost: 2, parallelism: 1 };

const dist = (path) => new URL(`../dist/src/${path}`, import.meta.url).href;

/** { query(text, params) → rows, close() } on PostgreSQL (a pg pool) or on a PGlite of our own. */
async function openStore(setup) {
  if (setup.databaseUrl) {
    if (setup.seed) {
      // Separate database: give it the service's schema first (the service's own migrations).
      const [{ openPg }, { migrate }] = await Promise.all([import(dist('db/pg.js')), import(dist('db/migrate.js'))]);
      const database = await openPg({ url: setup.databaseUrl, poolSize: 1 });
      try {
        await migrate(database);
      } finally {
        await database.close();
      }
    }
    const pool = new pg.Pool({ connectionString: setup.databaseUrl, max: setup.poolSize ?? 10 });
    pool.on('error', () => undefined);
    return { query: async (text, params) => (await pool.query(text, params)).rows, close: () => pool.end() };
  }
  // PGlite is single-process: the service's files cannot be opened here, so this is a PGlite of our
  // own with the same schema, through the same queueing wrapper the service uses.
  const [{ openPglite }, { migrate }] = await Promise.all([import(dist('db/pglite.js')), import(dist('db/migrate.js'))]);
  const database = await openPglite(setup.pgliteDir ?? null);
  await migrate(database);
  const db = database.scoped('system');
  return { query: async (text, params) => (await db.query(text, params)).rows, close: () => database.close() };
}

/** Not the service's database: insert the bench user with the same id, email and a password hash. */
async function seed(store, { userId, email, password }) {
  const passwordHash = await hash(password, ARGON2);
  await store.query(
    `INSERT INTO users (id, email, email_verified, status, test_mode, created_at, updated_at)
     VALUES ($1, $2, true, 'active', false, now(), now())`,
    [userId, email],
  );
  await store.query(
    `INSERT INTO identities (id, user_id, method, password_hash, created_at) VALUES ($1, $2, 'password', $3, now())`,
    [`idn_bench${randomBytes(8).toString('hex')}`, userId, passwordHash],
  );
}

// One thread verifying in a loop (the synchronous call, on the thread itself) until `seconds` pass.
// One such thread per core is the fastest a machine verifies: more hashes at once than cores only
// share the cores and evict each other's 19 MiB from the caches.
const argon2Path = createRequire(import.meta.url).resolve('@node-rs/argon2');
const LOOP_THREAD = `
  const { parentPort, workerData } = require('node:worker_threads');
  const { verifySync } = require(workerData.argon2Path);
  const end = performance.now() + workerData.seconds * 1000;
  let n = 0;
  while (performance.now() < end) {
    if (!verifySync(workerData.hash, 'bench-loop-password-0123')) throw new Error('argon2 loop: verify failed');
    n++;
  }
  parentPort.postMessage(n);`;
function argon2LoopThread(hash, seconds) {
  return new Promise((resolve, reject) => {
    const worker = new Worker(LOOP_THREAD, { eval: true, workerData: { argon2Path, hash, seconds } });
    worker.once('message', resolve);
    worker.once('error', reject);
  });
}

async function start(setup) {
  const store = await openStore(setup);
  if (setup.seed) await seed(store, setup.seed);
  const jwks = createLocalJWKSet(setup.jwks);
  const verifyOptions = { algorithms: ['RS256'], issuer: setup.issuer, audience: setup.audience, requiredClaims: ['exp', 'iat', 'sub', 'jti'] };

  const app = Fastify({ logger: false });

  app.get('/jwt-select', async (request, reply) => {
    const match = /^Bearer\s+(\S+)\s*$/i.exec(request.headers.authorization ?? '');
    if (!match) return reply.code(401).send({ error: 'unauthenticated' });
    let claims;
    try {
      ({ payload: claims } = await jwtVerify(match[1], jwks, verifyOptions));
    } catch {
      return reply.code(401).send({ error: 'unauthenticated' });
    }
    const rows = await store.query('SELECT id, email FROM users WHERE id = $1', [claims.sub]);
    if (!rows[0]) return reply.code(404).send({ error: 'not_found' });
    return { id: rows[0].id, email: rows[0].email };
  });

  app.get('/select', async (request, reply) => {
    const rows = await store.query('SELECT id, email FROM users WHERE id = $1', [request.query.id]);
    if (!rows[0]) return reply.code(404).send({ error: 'not_found' });
    return { id: rows[0].id, email: rows[0].email };
  });

  const loopHash = await hash('bench-loop-password-0123', ARGON2);
  app.post('/argon2-loop', async (request) => {
    const { seconds, threads = availableParallelism() } = request.body;
    const started = performance.now();
    const counts = await Promise.all(Array.from({ length: threads }, () => argon2LoopThread(loopHash, seconds)));
    return { verifications: counts.reduce((a, b) => a + b, 0), seconds: (performance.now() - started) / 1000, threads };
  });

  app.post('/argon2-select', async (request, reply) => {
    const { email, password } = request.body ?? {};
    if (typeof email !== 'string' || typeof password !== 'string') return reply.code(400).send({ error: 'bad_request' });
    const rows = await store.query(
      `SELECT u.id, i.password_hash
         FROM users u JOIN identities i ON i.user_id = u.id AND i.method = 'password'
        WHERE u.test_mode = false AND lower(u.email) = lower($1) AND u.status <> 'deleted'`,
      [email],
    );
    const ok = rows[0]?.password_hash ? await verify(rows[0].password_hash, password).catch(() => false) : false;
    if (!ok) return reply.code(401).send({ error: 'invalid_credentials' });
    return { user_id: rows[0].id };
  });

  await app.listen({ port: 0, host: '127.0.0.1' });

  let closing = false;
  const shutdown = async () => {
    if (closing) return;
    closing = true;
    try {
      await app.close();
      await store.close();
    } finally {
      process.exit(0);
    }
  };
  process.on('SIGTERM', shutdown);
  process.on('SIGINT', shutdown);
  process.on('disconnect', shutdown); // the bench process went away
  return app.server.address().port;
}

process.once('message', (msg) => {
  if (msg?.type !== 'setup') return;
  start(msg).then(
    (port) => process.send({ type: 'ready', port }),
    (err) => {
      process.send({ type: 'failed', error: err?.stack ?? String(err) }, () => process.exit(1));
    },
  );
});
