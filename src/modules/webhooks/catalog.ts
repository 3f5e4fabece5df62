import { randomBytes } from 'node:crypto';

/** Every event type a subscription may name (Part B Events); `*` subscribes to all of them. */
export const EVENT_TYPES = [
  'access.granted',
  'access.revoked',
  'entitlement.granted',
  'entitlement.disabled',
  'entitlement.revoked',
  'entitlement.expired',
  'entitlement.updated',
  'entitlement.member_scope_changed',
  'entitlement.deleted',
  'role.assigned',
  'role.removed',
  'user.suspended',
  'user.reactivated',
  'user.deleted',
  'organization.member_added',
  'organization.member_removed',
  'application.review_status_changed',
  'webhook.test',
] as const;
export type EventType = (typeof EVENT_TYPES)[number];

/** Published payload versions, oldest first; the last is pinned on new subscriptions. */
export const API_VERSIONS = ['2026-01-01'] as const;
export const CURRENT_API_VERSION: string = API_VERSIONS[API_VERSIONS.length - 1];

export const MAX_ATTEMPTS = 6;
/** Delay before attempt n+1 after attempt n started (index n-1): +1 m, +5 m, +30 m, +2 h, +12 h. */
export const RETRY_DELAYS_SECONDS = [60, 5 * 60, 30 * 60, 2 * 3600, 12 * 3600] as const;
export const DELIVERY_TIMEOUT_MS = 5000;
export const ROTATION_OVERLAP_SECONDS = 24 * 3600;
export const DELIVERY_LOG_DAYS = 30;
export const ERROR_BODY_BYTES = 1024;
export const UNHEALTHY_AFTER_EXHAUSTED = 3;
export const DISABLE_AFTER_UNHEALTHY_SECONDS = 5 * 86400;

/** `whsec_` plus 32 random bytes (base64url); the HMAC key is the UTF-8 bytes of the whole string. */
export const newSigningSecret = (): string => `whsec_${randomBytes(32).toString('base64url')}`;

export interface StoredEvent {
  id: string;
  type: string;
  application_id: string | null;
  test_mode: boolean;
  data: Record<string, unknown>;
  created_at: Date;
}

/**
 * The delivered body in the subscription's pinned api_version. Only one version is published, so
 * every version renders the stored data as is; a later version adds its transformation here.
 */
export function renderEnvelope(event: StoredEvent, apiVersion: string): string {
  return JSON.stringify({
    id: event.id,
    type: event.type,
    api_version: apiVersion,
    created_at: event.created_at.toISOString(),
    application_id: event.application_id,
    test_mode: event.test_mode,
    data: event.data,
  });
}

/** User and membership events reach an app-scope subscription only through an access path. */
export { isUserEvent } from '../../outbox/emit.js';
