import type { Queryable } from '../../db/types.js';
import { ApiError } from '../../errors.js';
import { checkAccess } from '../../access/check.js';
import { accessEndsAt } from '../../access/resolve.js';

/**
 * The app-tokens access rule (Part A Rule 7), shared by code issue and every token exchange:
 * the Application approved, its Tenant not suspended, the user active with resolved access allowed.
 * Returns when that access ends with time alone (accessEndsAt; null: it does not).
 */
export async function assertAppAccess(db: Queryable, userId: string, appId: string, now: Date): Promise<Date | null> {
  const { app, user, access, paths } = await checkAccess(db, userId, appId, now);
  if (!app || !user || !access) throw new ApiError('application_not_found');
  if (app.review_status !== 'approved') throw new ApiError('application_not_available', { details: { review_status: app.review_status } });
  if (app.tenant_suspended) throw new ApiError('tenant_suspended');
  if (user.status !== 'active' || !access.allowed) throw new ApiError('entitlement_required', { details: { entitlement_status: access.entitlement_status } });
  return accessEndsAt(paths, userId, appId, now);
}
