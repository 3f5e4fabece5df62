import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { ListOf, UserIdParam } from '../../http/schemas.js';
import { Entitlement, EntitlementIdParam, EntitlementListItem, EntitlementQuery, GrantBody, PatchEntitlementBody, UserEntitlementQuery } from './schemas.js';
import { grantPersonal } from './grant.js';
import { listEntitlements, listUserEntitlements, visibleEntitlement } from './read.js';
import { patchEntitlement } from './patch.js';
import { deleteEntitlement } from './remove.js';
import { assertIfMatch, etagOf, ifNoneMatchHolds, toEntitlement } from './store.js';

const tags = ['Entitlements'];
/** The row's strong ETag, for If-Match on the next PATCH. */
const ETAG = { ETag: 'A strong tag of the row as returned; send it as If-Match on a PATCH or DELETE (412 precondition_failed once the row changed).' };
/** RFC 9110 §13.1.1, §13.1.2: the preconditions a write (PATCH, DELETE) is judged under. */
const PreconditionHeaders = Type.Object({ 'if-match': Type.Optional(Type.String({ maxLength: 200 })), 'if-none-match': Type.Optional(Type.String({ maxLength: 200 })) });

export function entitlementRoutes(app: App, deps: Deps): void {
  app.get('/v1/users/:id/entitlements', {
    schema: { summary: "A user's personal and organization-wide Entitlements", tags, params: UserIdParam, querystring: UserEntitlementQuery, response: { 200: ListOf(EntitlementListItem) } },
    config: { meta: { auth: 'any', errors: ['user_not_found'] } },
    handler: (request) => listUserEntitlements(ctxOf(deps, request), request.params.id, request.query),
  });
  app.post('/v1/users/:id/entitlements', {
    schema: { summary: 'Grant a personal Entitlement', tags, params: UserIdParam, body: GrantBody, response: { 201: Entitlement } },
    config: {
      meta: {
        auth: 'any',
        idempotency: 'required',
        errors: ['user_not_found', 'application_not_found', 'application_not_available', 'entitlement_already_exists', 'invalid_source', 'ends_at_required', 'plan_limit_reached', 'subscription_required', 'forbidden'],
      },
    },
    handler: async (request, reply) => {
      const entitlement = await grantPersonal(ctxOf(deps, request), request.params.id, request.body);
      reply.code(201);
      return entitlement;
    },
  });
  app.get('/v1/entitlements', {
    schema: { summary: 'Cross-user list of Entitlements', tags, querystring: EntitlementQuery, response: { 200: ListOf(EntitlementListItem) } },
    config: { meta: { auth: 'any', errors: ['forbidden'] } },
    handler: (request) => listEntitlements(ctxOf(deps, request), request.query),
  });
  app.get('/v1/entitlements/:id', {
    schema: {
      summary: 'Fetch an Entitlement',
      description: 'With If-None-Match naming the current ETag (or `*`): 304 without a body (RFC 9110 §13.1.2); with an If-Match naming none of it: 412.',
      tags,
      params: EntitlementIdParam,
      response: { 200: Entitlement, 304: Type.Null({ description: 'Not modified: the If-None-Match tag is current.' }) },
    },
    config: { meta: { auth: 'any', errors: ['entitlement_not_found', 'precondition_failed'], headers: ETAG } },
    handler: async (request, reply) => {
      const { row } = await visibleEntitlement(ctxOf(deps, request), request.params.id);
      const etag = etagOf(row);
      reply.header('etag', etag);
      // RFC 9110 §13.2.2: If-Match first, on a GET too (412 when no listed tag is the current one).
      assertIfMatch(request.headers['if-match'], etag);
      const ifNoneMatch = request.headers['if-none-match'];
      // No payload at all: a 304 has no body and no Content-Length of its own (RFC 9110 §15.4.5).
      if (ifNoneMatch !== undefined && !ifNoneMatchHolds(ifNoneMatch, etag)) return reply.code(304).send(undefined as never);
      return toEntitlement(row);
    },
  });
  app.patch('/v1/entitlements/:id', {
    schema: {
      summary: 'Toggle and edit an Entitlement',
      description: 'Send If-Match with the ETag when two operators might act on one row (412 on a stale write); an If-None-Match naming the current ETag, or `*`, is 412 too.',
      tags,
      params: EntitlementIdParam,
      headers: PreconditionHeaders,
      body: PatchEntitlementBody,
      response: { 200: Entitlement },
    },
    config: {
      meta: {
        auth: 'any',
        idempotency: 'optional',
        destructive: { when: 'status is set to disabled or revoked, or ends_at to a time not after now (access ends at once)', test: (request) => endsAccess(request.body, deps.clock.now()) },
        errors: ['entitlement_not_found', 'invalid_status_transition', 'disabled_reason_required', 'ends_at_required', 'immutable_field', 'read_only_field', 'not_an_org_grant', 'member_override_not_a_member', 'entitlement_already_exists', 'plan_limit_reached', 'subscription_required', 'precondition_failed', 'forbidden', 'organization_suspended', 'application_not_available'],
        headers: ETAG,
      },
    },
    handler: async (request, reply) => {
      const { entitlement, etag } = await patchEntitlement(ctxOf(deps, request), request.params.id, request.body, request.headers['if-match'], request.headers['if-none-match']);
      reply.header('etag', etag);
      return entitlement;
    },
  });
  app.delete('/v1/entitlements/:id', {
    schema: {
      summary: 'Hard-remove a grant made in error',
      description: 'An If-Match that names no current ETag, or an If-None-Match naming it (or `*`), is 412 and removes nothing.',
      tags,
      params: EntitlementIdParam,
      headers: PreconditionHeaders,
      response: { 204: Type.Null() },
    },
    config: { meta: { auth: 'any', permission: 'entitlements.manage', destructive: 'always', destructiveGate: 'service', errors: ['entitlement_not_found', 'entitlement_order_linked', 'entitlement_too_old', 'organization_suspended', 'precondition_failed'] } },
    handler: async (request, reply) => {
      await deleteEntitlement(ctxOf(deps, request), request.params.id, request.headers['if-match'], request.headers['if-none-match']);
      reply.code(204);
      return null;
    },
  });
}

/**
 * PATCH /v1/entitlements/{id}'s destructive condition (Part A convention 11): a move to disabled or
 * revoked, or an ends_at already reached, which ends access now as a revocation does (Part B: the row
 * is expired at once for resolution; access.revoked fires). Judged on the body as sent, before it is
 * validated, so it reads nothing it cannot trust.
 */
function endsAccess(body: unknown, now: Date): boolean {
  const { status, ends_at: endsAt } = (body ?? {}) as { status?: unknown; ends_at?: unknown };
  if (status === 'disabled' || status === 'revoked') return true;
  return typeof endsAt === 'string' && Date.parse(endsAt) <= now.getTime();
}
