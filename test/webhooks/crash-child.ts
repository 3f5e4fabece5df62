// A service process that subscribes a receiver, commits one event and is killed (SIGKILL) at once,
// before any relay or worker could run. Used by durability.test.ts; not a test file itself.
// Env: CRASH_STORAGE = `pglite:<dir>` or `pg:<schema>` (with TEST_DATABASE_URL), RECEIVER_URL.
import { SystemClock } from '../../src/clock.js';
import { openPglite } from '../../src/db/pglite.js';
import { openPg } from '../../src/db/pg.js';
import { boot } from '../../src/boot.js';
import { systemCtx } from '../../src/context.js';
import { emit } from '../../src/outbox/emit.js';
import { testConfig, type TestApp } from '../helpers/app.js';
import { createApiKey } from '../helpers/fixtures.js';

const [kind, where] = (process.env.CRASH_STORAGE ?? '').split(/:(.*)/s);
const database = kind === 'pg' ? await openPg({ url: process.env.TEST_DATABASE_URL!, schema: where, poolSize: 2 }) : await openPglite(where);
const clock = new SystemClock();
const config = testConfig({ webhookAllowPrivateTargets: true });
const { app, deps } = await boot({ config, database, clock, logger: false });
await app.ready();
const key = await createApiKey({ database, clock } as unknown as TestApp, { scope: 'platform', permissions: ['webhooks.manage'] });
const res = await app.inject({
  method: 'POST',
  url: '/v1/webhooks',
  headers: { authorization: `Bearer ${key.secret}` },
  payload: { scope: 'platform', url: process.env.RECEIVER_URL, events: ['*'] },
});
if (res.statusCode !== 201) throw new Error(`subscribe failed: ${res.body}`);
const ctx = systemCtx(deps);
const eventId = await ctx.db.transaction((tx) => emit(tx, { ...ctx, db: tx }, { type: 'user.suspended', data: { user_id: 'usr_crash' } }));
process.stdout.write(`${JSON.stringify({ eventId, subscriptionId: res.json().id })}\n`);
process.kill(process.pid, 'SIGKILL');
