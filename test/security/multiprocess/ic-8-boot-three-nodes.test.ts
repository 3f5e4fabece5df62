// IC-8 [MP], the boot part with real processes: "3 nodes start together on an empty DB with
// BOOTSTRAP_ADMIN_*" (test/foundation/storage-starts.test.ts boots two in one process). Three server
// processes of src/main.ts start at once on a fresh database; operations.md: the bootstrap admin is
// "Idempotent across restarts and across several nodes starting at once". Expected: every migration
// applied once, one admin (active, email_verified, superadmin) with one user.created audit row by
// system, and every node answering.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { Cluster } from './cluster.js';
import { PASSWORD, uniqueEmail } from './fixtures.js';

const RUNS = 2;

test(`IC-8 [MP] 3 nodes start together on an empty database with BOOTSTRAP_ADMIN_*: migrations run once, one admin and one audit event (${RUNS} runs)`, async () => {
  const problems: string[] = [];
  for (let run = 0; run < RUNS; run++) {
    const email = uniqueEmail('boot');
    const c = await Cluster.start({ nodes: 3, env: { BOOTSTRAP_ADMIN_EMAIL: email, BOOTSTRAP_ADMIN_PASSWORD: PASSWORD } });
    try {
      const twice = await c.sql<{ version: string; n: number }>('SELECT version, count(*)::int AS n FROM schema_migrations GROUP BY version HAVING count(*) > 1');
      if (twice.length) problems.push(`run ${run}: migrations applied more than once: ${JSON.stringify(twice)}`);
      const users = await c.sql<{ id: string; status: string; email_verified: boolean }>('SELECT id, status, email_verified FROM users WHERE lower(email) = lower($1)', [email]);
      if (users.length !== 1) {
        problems.push(`run ${run}: ${users.length} bootstrap admins`);
        continue;
      }
      const [admin] = users;
      if (admin.status !== 'active' || !admin.email_verified) problems.push(`run ${run}: admin ${admin.status}, email_verified ${admin.email_verified}`);
      const audits = await c.sql<{ actor_type: string }>(`SELECT actor_type FROM audit_events WHERE action = 'user.created' AND target_user_id = $1`, [admin.id]);
      if (audits.length !== 1 || audits[0].actor_type !== 'system') problems.push(`run ${run}: user.created audit rows ${JSON.stringify(audits)}`);
      const superadmins = await c.sql(`SELECT 1 FROM role_assignments WHERE user_id = $1 AND role_id = 'role_platform_superadmin'`, [admin.id]);
      if (superadmins.length !== 1) problems.push(`run ${run}: ${superadmins.length} superadmin assignments`);
      for (const node of c.nodes) {
        const login = await node.call('POST', '/v1/auth/login', { body: { email, password: PASSWORD } });
        if (login.status !== 200) problems.push(`run ${run}: login on ${node.name}: ${login.status} ${login.text.slice(0, 120)}`);
      }
    } finally {
      await c.close();
    }
  }
  assert.deepEqual(problems, []);
});
