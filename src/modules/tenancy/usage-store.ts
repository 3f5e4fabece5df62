import type { Queryable } from '../../db/types.js';

export async function countTenantApplications(db: Queryable, tenantId: string): Promise<number> {
  const { rows } = await db.query<{ n: number }>('SELECT count(*)::int AS n FROM applications WHERE tenant_id = $1', [tenantId]);
  return rows[0].n;
}

/** The Tenant's Applications, and the highest length of available_app_roles on any one of them. */
export async function measureTenantApplications(db: Queryable, tenantId: string): Promise<{ applications: number; app_roles: number }> {
  const { rows } = await db.query<{ applications: number; app_roles: number }>(
    `SELECT count(*)::int AS applications, COALESCE(max(cardinality(available_app_roles)), 0)::int AS app_roles
       FROM applications WHERE tenant_id = $1`,
    [tenantId],
  );
  return rows[0];
}

/** Which of the columns naming a webhook subscription's Application exist (none until the webhooks table does). */
export async function listWebhookTargetColumns(db: Queryable): Promise<{ column_name: string }[]> {
  const { rows } = await db.query<{ column_name: string }>(
    `SELECT column_name FROM information_schema.columns
      WHERE table_name = 'webhook_subscriptions' AND table_schema = current_schema() AND column_name IN ('application_id', 'scope')
        AND to_regclass('webhook_subscriptions') IS NOT NULL`,
  );
  return rows;
}

/** Webhook subscriptions whose `column` names one of the Tenant's Applications. */
export async function countTenantWebhookSubscriptions(db: Queryable, tenantId: string, column: 'application_id' | 'scope'): Promise<number> {
  const counted = await db.query<{ n: number }>(
    `SELECT count(*)::int AS n FROM webhook_subscriptions w WHERE w.${column} IN (SELECT a.id FROM applications a WHERE a.tenant_id = $1)`,
    [tenantId],
  );
  return counted.rows[0].n;
}
