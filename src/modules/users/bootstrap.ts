import { createHash } from 'node:crypto';
import type { Deps } from '../../context.js';
import { systemCtx } from '../../context.js';
import { assertStrongPassword, hashPassword } from '../../auth/passwords.js';
import { findLiveUserByEmail, takeAdvisoryLock } from './store.js';
import { createUserRecords, SUPERADMIN_ROLE_ID } from './service.js';
import { announceRoleChange } from '../roles/assignments.js';

/**
 * BOOTSTRAP_ADMIN_EMAIL / _PASSWORD and `platform bootstrap-admin`: unless a live user holds the
 * email, create it active, verified and superadmin, audited with actor system. An advisory lock
 * keyed by the email makes it idempotent when several nodes start at once.
 */
export async function bootstrapAdmin(deps: Deps, email: string, password: string): Promise<{ created: boolean; userId: string }> {
  const ctx = systemCtx(deps, 'live');
  const existing = await findLiveUserByEmail(ctx.db, email);
  if (existing) return { created: false, userId: existing.id };
  assertStrongPassword(password, email);
  const passwordHash = await hashPassword(password);
  const lockKey = createHash('sha256').update(`bootstrap:${email.toLowerCase()}`).digest().readInt32BE(0);
  return ctx.db.transaction(async (tx) => {
    await takeAdvisoryLock(tx, lockKey);
    const again = await findLiveUserByEmail(tx, email);
    if (again) return { created: false, userId: again.id };
    const user = await createUserRecords(tx, ctx, {
      email,
      status: 'active',
      emailVerified: true,
      passwordHash,
      extraRoleIds: [SUPERADMIN_ROLE_ID],
    });
    // The superadmin Role is a privileged assignment like any other: audited and announced.
    await announceRoleChange(tx, ctx, 'role.assigned', { user_id: user.id, role_id: SUPERADMIN_ROLE_ID, application_id: null });
    return { created: true, userId: user.id };
  });
}
