// An event committed by a process that is killed (SIGKILL) right after the commit, before any relay
// or worker ran, is delivered by the next process: the transactional outbox is durable.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { TEST_DATABASE_URL, dropSchema, testConfig } from '../helpers/app.js';
import { freshSchemaName } from '../foundation/support/ops.js';
import { SystemClock } from '../../src/clock.js';
import { openPglite } from '../../src/db/pglite.js';
import { openPg } from '../../src/db/pg.js';
import { boot } from '../../src/boot.js';
import { closeWebhookTransport } from '../../src/modules/webhooks/transport.js';
import { Receiver } from './support.js';

let receiver: Receiver;
after(() => receiver?.close());

test('an event committed by a process killed (SIGKILL) right after the commit is delivered by the next process', async () => {
  receiver = await Receiver.start();
  const storage = TEST_DATABASE_URL ? { kind: 'pg', where: freshSchemaName('crash') } : { kind: 'pglite', where: mkdtempSync(join(tmpdir(), 'crash-')) };
  try {
    const out = await new Promise<string>((resolve, reject) => {
      const child = spawn(process.execPath, ['--import', 'tsx', 'test/webhooks/crash-child.ts'], {
        env: { ...process.env, CRASH_STORAGE: `${storage.kind}:${storage.where}`, RECEIVER_URL: receiver.url('/crash') },
        stdio: ['ignore', 'pipe', 'inherit'],
      });
      let text = '';
      child.stdout.on('data', (c) => (text += c));
      child.on('error', reject);
      child.on('exit', (_code, signal) => (signal === 'SIGKILL' ? resolve(text) : reject(new Error(`child exited without being killed: ${text}`))));
    });
    const { eventId, subscriptionId } = JSON.parse(out.trim());
    assert.equal(receiver.at('/crash').length, 0, 'nothing was sent before the kill');
    const database = storage.kind === 'pg' ? await openPg({ url: TEST_DATABASE_URL!, schema: storage.where, poolSize: 2 }) : await openPglite(storage.where);
    const next = await boot({ config: testConfig({ webhookAllowPrivateTargets: true }), database, clock: new SystemClock(), logger: false });
    try {
      await next.deps.jobs.runNow('webhook-delivery');
      const [got] = receiver.at('/crash');
      assert.ok(got, 'delivered after the restart');
      assert.equal(got.body.id, eventId);
      assert.equal(got.headers['platform-event-id'], eventId);
      const { rows } = await database.scoped('system').query('SELECT status FROM webhook_deliveries WHERE subscription_id = $1', [subscriptionId]);
      assert.deepEqual(rows.map((r) => r.status), ['succeeded']);
    } finally {
      await closeWebhookTransport(next.deps);
      await next.app.close();
      await database.close();
    }
  } finally {
    if (storage.kind === 'pg') await dropSchema(storage.where);
    else rmSync(storage.where, { recursive: true, force: true });
  }
});
