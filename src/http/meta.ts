import type { FastifyRequest } from 'fastify';
import type { ErrorCode } from '../errors.js';

export const PLATFORM_PERMISSIONS = [
  'users.list',
  'users.manage',
  'entitlements.manage',
  'applications.manage',
  'roles.manage',
  'organizations.manage',
  'billing.manage',
  'billing.refund',
  'audit.view',
  'webhooks.manage',
  'api_keys.manage',
  'tenants.manage',
] as const;
export type PlatformPermission = (typeof PLATFORM_PERMISSIONS)[number];

export type Destructive =
  | 'always'
  | {
      /** Human-readable condition, published as x-platform-destructive-when. */
      when: string;
      test: (request: FastifyRequest) => boolean;
    };

/**
 * Route metadata: the single source for the credential requirement, the permission gate, the
 * destructive gate, idempotency, throttling and the OpenAPI marks.
 */
export interface RouteMeta {
  /** none: no credential; user: a User token (an API key gets 400 user_token_required); any: user or key. */
  auth: 'none' | 'user' | 'any';
  /** A platform permission the caller must hold. Finer rules (self, owner, app-confined) live in services. */
  permission?: PlatformPermission;
  destructive?: Destructive;
  /**
   * service: the gate leaves the destructive refusal to the route's service, which calls
   * assertDestructiveAllowed after the refusals that hold for every caller, restricted keys included
   * (Part B: DELETE of an order-linked Entitlement is 409 entitlement_order_linked "for every caller
   * and regardless of restrict_destructive"). The OpenAPI marks still come from `destructive`.
   */
  destructiveGate?: 'service';
  idempotency?: 'required' | 'optional';
  /** Per-IP throttle of the unauthenticated auth endpoints (AUTH_RATE_LIMIT_PER_MINUTE). */
  throttle?: 'auth';
  /**
   * fused: the route checks a User token's session inside its own query (one round trip for the
   * hottest reads); the gate verifies the token's signature and claims only and hands the route a
   * user actor marked `unconfirmed`, with no permissions until the route confirms it. Only for routes
   * without permission, destructive or idempotency metadata.
   */
  session?: 'fused';
  /**
   * The route exists only to answer its method with a 405 page (a form step opened by GET): the
   * resource does not support the method, so no 405's Allow lists it (RFC 9110 §15.5.6). Static URLs only.
   */
  refusesMethod?: true;
  /** Error codes the operation itself can answer; published in the OpenAPI document by status. */
  errors?: ErrorCode[];
  /** Headers the success response carries that a client reads (name: what it holds); published in the OpenAPI document. */
  headers?: Record<string, string>;
}

declare module 'fastify' {
  interface FastifyContextConfig {
    meta?: RouteMeta;
  }
}

export function metaOf(request: FastifyRequest): RouteMeta | undefined {
  return request.routeOptions.config?.meta;
}
