import type { App } from '../types.js';
import type { Deps } from '../../context.js';
import { ctxOf } from '../../http/gate.js';
import { ListOf } from '../../http/schemas.js';
import { CreateTierChangeBody, PatchTierChangeBody, RequestIdParam, Tenant, TenantIdParam, TenantListQuery, TierChangeListQuery, TierChangeRequest } from './schemas.js';
import type { PatchTierChangeBody as PatchBody } from './schemas.js';
import { getTenant, listTenants } from './service.js';
import { createTierChange, getTierChange, listTierChanges } from './tier-change.js';
import { patchTierChange } from './tier-change-patch.js';

const tags = ['Tenancy'];

export function tenancyRoutes(app: App, deps: Deps): void {
  app.get('/v1/tenants', {
    schema: { summary: "List Tenants: the caller's own, or every Tenant for tenants.manage", tags, querystring: TenantListQuery, response: { 200: ListOf(Tenant) } },
    config: { meta: { auth: 'any' } },
    handler: (request) => listTenants(ctxOf(deps, request), request.query),
  });
  app.get('/v1/tenants/:id', {
    schema: { summary: 'Fetch a Tenant', tags, params: TenantIdParam, response: { 200: Tenant } },
    config: { meta: { auth: 'any', errors: ['tenant_not_found'] } },
    handler: (request) => getTenant(ctxOf(deps, request), request.params.id),
  });
  app.post('/v1/tenants/:id/tier-change-requests', {
    schema: { summary: 'Request a tier change (support-run migration)', tags, params: TenantIdParam, body: CreateTierChangeBody, response: { 201: TierChangeRequest } },
    config: {
      meta: {
        auth: 'any',
        permission: 'tenants.manage',
        destructive: 'always',
        idempotency: 'optional',
        errors: ['tenant_not_found', 'invalid_tier_transition', 'plan_does_not_allow_tier', 'unsupported_region', 'tier_change_already_pending'],
      },
    },
    handler: async (request, reply) => {
      const created = await createTierChange(ctxOf(deps, request), request.params.id, request.body);
      reply.code(201);
      return created;
    },
  });
  app.get('/v1/tenants/:id/tier-change-requests', {
    schema: { summary: "A Tenant's tier-change requests", tags, params: TenantIdParam, querystring: TierChangeListQuery, response: { 200: ListOf(TierChangeRequest) } },
    config: { meta: { auth: 'any', errors: ['tenant_not_found', 'forbidden'] } },
    handler: (request) => listTierChanges(ctxOf(deps, request), request.params.id, request.query),
  });
  app.get('/v1/tenants/:id/tier-change-requests/:requestId', {
    schema: { summary: 'Fetch a tier-change request', tags, params: RequestIdParam, response: { 200: TierChangeRequest } },
    config: { meta: { auth: 'any', errors: ['tenant_not_found', 'tier_change_request_not_found', 'forbidden'] } },
    handler: (request) => getTierChange(ctxOf(deps, request), request.params.id, request.params.requestId),
  });
  app.patch('/v1/tenants/:id/tier-change-requests/:requestId', {
    schema: {
      summary: 'Move a tier-change request (schedule, start, complete, cancel) or edit its notes',
      tags,
      params: RequestIdParam,
      body: PatchTierChangeBody,
      response: { 200: TierChangeRequest },
    },
    config: {
      meta: {
        auth: 'any',
        permission: 'tenants.manage',
        idempotency: 'optional',
        errors: ['tenant_not_found', 'tier_change_request_not_found', 'invalid_request_transition', 'read_only_field'],
      },
    },
    handler: (request) => patchTierChange(ctxOf(deps, request), request.params.id, request.params.requestId, request.body as PatchBody),
  });
}
