import type { Ctx } from '../context.js';
import type { Mode, Tx } from '../db/types.js';
import { inSubjectMode } from '../db/roles.js';
import { newId } from '../ids.js';

export interface AuditEntry {
  action: string;
  target?: { type: string; id: string };
  targetUserId?: string | null;
  applicationId?: string | null;
  organizationId?: string | null;
  tenantId?: string | null;
  before?: unknown;
  after?: unknown;
  /** Who acted, when it is not the request's credential (a signup acts as the new user). */
  actor?: { type: 'user' | 'api_key' | 'system'; id: string | null };
  /**
   * The mode of what the row is about, when it is not the caller's: an Application's (and its Roles'),
   * shared by both modes (Part A convention 10). The row is read by that mode's readers and purged
   * with test data only when it is test data.
   */
  mode?: Mode;
}

/**
 * Writes an audit row in the mutation's transaction, so the change and its record commit together.
 * An event about an Application carries that Application's Tenant unless the entry names one. The
 * row is of the caller's mode unless the entry names its subject's (`mode`).
 */
export async function recordAudit(tx: Tx, ctx: Ctx, entry: AuditEntry): Promise<string> {
  const id = newId('evt');
  const actor = ctx.actor;
  const actorType = entry.actor?.type ?? (actor.type === 'user' ? 'user' : actor.type === 'api_key' ? 'api_key' : 'system');
  const actorId = entry.actor ? entry.actor.id : actor.type === 'user' ? actor.userId : actor.type === 'api_key' ? actor.keyId : null;
  const mode = entry.mode ?? ctx.mode;
  await inSubjectMode(tx, mode, () => tx.query(
    `INSERT INTO audit_events (id, action, actor_type, actor_id, via_api_key_id, target_type, target_id,
       target_user_id, application_id, organization_id, tenant_id, before, after, request_id, test_mode, created_at)
     VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10,
             COALESCE($11::text, (SELECT a.tenant_id FROM applications a WHERE a.id = $9::text)), $12, $13, $14, $15, $16)`,
    [
      id,
      entry.action,
      actorType,
      actorId,
      actor.type === 'api_key' ? actor.keyId : null,
      entry.target?.type ?? null,
      entry.target?.id ?? null,
      entry.targetUserId ?? null,
      entry.applicationId ?? null,
      entry.organizationId ?? null,
      entry.tenantId ?? null,
      entry.before === undefined ? null : JSON.stringify(entry.before),
      entry.after === undefined ? null : JSON.stringify(entry.after),
      ctx.requestId,
      mode === 'test',
      ctx.now,
    ],
  ));
  return id;
}
