import type { Ctx } from '../../context.js';
import { hasPermission } from '../../context.js';
import { MEMBER_DECISION_SQL } from '../../access/resolve.js';

/** Who is asking, reduced to what Application visibility depends on. */
export interface Viewer {
  admin: boolean;
  userId: string | null;
  keyApp: string | null;
}

export function viewerOf(ctx: Ctx): Viewer {
  const keyApp = ctx.actor.type === 'api_key' && ctx.actor.scope !== 'platform' ? ctx.actor.scope : null;
  return {
    admin: hasPermission(ctx.actor, 'applications.manage') && !keyApp,
    userId: ctx.actor.type === 'user' ? ctx.actor.userId : null,
    keyApp,
  };
}

/** SQL: the user owns Application `a` (owner_user_id, or active org_admin of the owning Organization). */
export const ownerCondition = (userParam: number) =>
  `(a.owner_user_id = $${userParam} OR a.owner_organization_id IN (SELECT m.organization_id FROM organization_members m
      WHERE m.user_id = $${userParam} AND m.role = 'org_admin' AND m.membership_status = 'active'))`;

/**
 * SQL: the user has any access path to Application `a`: a personal row in any status, or an org grant
 * of an Organization they are an active member of that includes them (a member the grant excludes,
 * or marks seat_limit, has no path through it).
 */
export const accessPathToApp = (userParam: number) =>
  `(EXISTS (SELECT 1 FROM entitlements ep WHERE ep.application_id = a.id AND ep.user_id = $${userParam})
    OR EXISTS (SELECT 1 FROM entitlements e JOIN organization_members m ON m.organization_id = e.organization_id
                WHERE e.application_id = a.id AND m.user_id = $${userParam} AND m.membership_status = 'active'
                  AND ${MEMBER_DECISION_SQL} = 'included'))`;

/**
 * Part B visibility: public to everyone while approved; invite_only to users with an access path;
 * internal only to applications.manage and the Application's own key (not its owner). Owners, the own
 * key and applications.manage see their other Applications in every review_status.
 */
export function visibleCondition(viewer: Viewer, params: unknown[]): string {
  if (viewer.admin) return 'TRUE';
  // An app-confined key reaches only its own Application (Part A, Authentication 4; others 404).
  if (viewer.keyApp) {
    params.push(viewer.keyApp);
    return `a.id = $${params.length}`;
  }
  const parts: string[] = [];
  if (viewer.userId) {
    params.push(viewer.userId);
    const u = params.length;
    parts.push(`(a.visibility <> 'internal' AND ${ownerCondition(u)})`);
    parts.push(`(a.review_status = 'approved' AND (a.visibility = 'public' OR (a.visibility = 'invite_only' AND ${accessPathToApp(u)})))`);
  } else {
    parts.push(`(a.review_status = 'approved' AND a.visibility = 'public')`);
  }
  return `(${parts.join(' OR ')})`;
}
