import { Type } from '@sinclair/typebox';
import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { ListOf } from '../../http/schemas.js';
import { EntitlementListItem, EntitlementQuery } from '../entitlements/schemas.js';
import { listEntitlements } from '../entitlements/read.js';
import { AddMemberBody, CreateOrgBody, Member, MemberListQuery, Organization, OrgGrantBody, OrgIdParam, OrgListQuery, OrgMemberParams, PatchMemberBody, PatchOrgBody } from './schemas.js';
import { createOrganization, getOrganization, listOrganizations, orgAccess, patchOrganization } from './service.js';
import { acceptMembership, addMember, changeMemberRole, listMembers, removeMember } from './members.js';
import { grantOrganization } from './grants.js';

const tags = ['Organizations'];
const orgErrors = ['organization_not_found', 'forbidden', 'organization_suspended'] as const;

export function organizationRoutes(app: App, deps: Deps): void {
  app.get('/v1/organizations', {
    schema: { summary: 'Own Organizations (everything for organizations.manage)', tags, querystring: OrgListQuery, response: { 200: ListOf(Organization) } },
    config: { meta: { auth: 'any', errors: ['forbidden'] } },
    handler: (request) => listOrganizations(ctxOf(deps, request), request.query),
  });
  app.post('/v1/organizations', {
    schema: { summary: 'Create an Organization; the caller becomes its first org_admin', tags, body: CreateOrgBody, response: { 201: Organization } },
    config: { meta: { auth: 'user', idempotency: 'optional', errors: ['rate_limited'] } },
    handler: async (request, reply) => {
      const org = await createOrganization(ctxOf(deps, request), request.body.name);
      reply.code(201);
      return org;
    },
  });
  app.get('/v1/organizations/:id', {
    schema: { summary: 'Fetch an Organization', tags, params: OrgIdParam, response: { 200: Organization } },
    config: { meta: { auth: 'any', errors: ['organization_not_found'] } },
    handler: (request) => getOrganization(ctxOf(deps, request), request.params.id),
  });
  app.patch('/v1/organizations/:id', {
    schema: { summary: 'Rename, suspend or reactivate', tags, params: OrgIdParam, body: PatchOrgBody, response: { 200: Organization } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: [...orgErrors, 'read_only_field'] } },
    handler: (request) => patchOrganization(ctxOf(deps, request), request.params.id, request.body),
  });
  app.get('/v1/organizations/:id/members', {
    schema: { summary: 'List members', tags, params: OrgIdParam, querystring: MemberListQuery, response: { 200: ListOf(Member) } },
    config: { meta: { auth: 'any', errors: ['organization_not_found'] } },
    handler: (request) => listMembers(ctxOf(deps, request), request.params.id, request.query),
  });
  app.post('/v1/organizations/:id/members', {
    schema: { summary: 'Invite by email or add by user_id', tags, params: OrgIdParam, body: AddMemberBody, response: { 201: Member } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: [...orgErrors, 'already_member', 'user_not_found', 'rate_limited'] } },
    handler: async (request, reply) => {
      const member = await addMember(ctxOf(deps, request), request.params.id, request.body);
      reply.code(201);
      return member;
    },
  });
  app.post('/v1/organizations/:id/members/me/accept', {
    schema: { summary: 'Accept a pending membership', tags, params: OrgIdParam, body: Type.Object({}, { additionalProperties: false }), response: { 200: Member } },
    config: { meta: { auth: 'user', errors: ['member_not_found', 'organization_suspended'] } },
    handler: (request) => acceptMembership(ctxOf(deps, request), request.params.id),
  });
  app.patch('/v1/organizations/:id/members/:userId', {
    schema: { summary: "Change a member's role", tags, params: OrgMemberParams, body: PatchMemberBody, response: { 200: Member } },
    config: { meta: { auth: 'any', idempotency: 'optional', errors: [...orgErrors, 'member_not_found', 'last_org_admin', 'read_only_field'] } },
    handler: (request) => changeMemberRole(ctxOf(deps, request), request.params.id, request.params.userId, request.body),
  });
  app.delete('/v1/organizations/:id/members/:userId', {
    schema: { summary: 'Remove, withdraw, leave or decline', tags, params: OrgMemberParams, response: { 204: Type.Null() } },
    config: { meta: { auth: 'any', destructive: 'always', errors: [...orgErrors, 'member_not_found', 'last_org_admin'] } },
    handler: async (request, reply) => {
      await removeMember(ctxOf(deps, request), request.params.id, request.params.userId);
      reply.code(204);
      return null;
    },
  });
  app.get('/v1/organizations/:id/entitlements', {
    schema: { summary: 'Organization-wide grants', tags, params: OrgIdParam, querystring: EntitlementQuery, response: { 200: ListOf(EntitlementListItem) } },
    config: { meta: { auth: 'any', errors: ['organization_not_found'] } },
    handler: async (request) => {
      const ctx = ctxOf(deps, request);
      await orgAccess(ctx, request.params.id);
      return listEntitlements(ctx, request.query, { organizationId: request.params.id });
    },
  });
  app.post('/v1/organizations/:id/entitlements', {
    schema: { summary: 'Grant an Application to an Organization', tags, params: OrgIdParam, body: OrgGrantBody, response: { 201: EntitlementListItem } },
    config: {
      meta: {
        auth: 'any',
        idempotency: 'required',
        errors: [...orgErrors, 'application_not_found', 'application_not_available', 'entitlement_already_exists', 'member_override_not_a_member', 'subscription_required'],
      },
    },
    handler: async (request, reply) => {
      const grant = await grantOrganization(ctxOf(deps, request), request.params.id, request.body);
      reply.code(201);
      return grant;
    },
  });
}
