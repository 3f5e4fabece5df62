import { ACCESS_REASONS } from '../../access/flips.js';
import { PATH_STATUSES } from '../roles/schemas.js';
import { REVIEW_STATUSES } from '../applications/schemas.js';
import { DELIVERY_TIMEOUT_MS, EVENT_TYPES, MAX_ATTEMPTS, type EventType } from './catalog.js';
import { SIGNATURE_HEADER } from './signature.js';

const str = (description?: string) => ({ type: 'string', ...(description ? { description } : {}) });
const nullableStr = (description: string) => ({ type: ['string', 'null'], description });
const openEnum = (values: readonly string[]) => ({ type: 'string', description: `One of ${values.join(', ')}; new values may be added.`, 'x-extensible-enum': values });
const object = (properties: Record<string, unknown>) => ({ type: 'object', required: Object.keys(properties), properties });
const ENTITLEMENT = { $ref: '#/components/schemas/Entitlement' };

/** Each event's `data` (Part B, Derived access events and Resource events). */
function dataOf(type: EventType): Record<string, unknown> {
  if (type === 'access.granted' || type === 'access.revoked') {
    return object({
      user_id: str(),
      application_id: str(),
      reason: openEnum(ACCESS_REASONS),
      entitlement_status: { ...openEnum([...PATH_STATUSES, 'none']), description: `The resolved status after the flip (\`active\` for access.granted). ${openEnum([...PATH_STATUSES, 'none']).description}` },
    });
  }
  if (type === 'entitlement.updated') return object({ entitlement: ENTITLEMENT, changed_fields: { type: 'array', items: openEnum(['ends_at', 'source', 'order_id']) } });
  if (type === 'entitlement.deleted') return object({ entitlement: { ...ENTITLEMENT, description: 'Its last state.' } });
  if (type.startsWith('entitlement.')) return object({ entitlement: ENTITLEMENT });
  if (type === 'role.assigned' || type === 'role.removed') return object({ user_id: str(), role_id: str(), application_id: nullableStr('null for a platform Role.') });
  if (type.startsWith('user.')) return object({ user_id: str() });
  if (type.startsWith('organization.member_')) return object({ organization_id: str(), user_id: str(), role: openEnum(['org_admin', 'member']) });
  if (type === 'application.review_status_changed') return object({ application_id: str(), review_status: openEnum(REVIEW_STATUSES), review_notes: nullableStr('The reviewer\'s notes, if any.') });
  return object({ message: str() });
}

const WHEN: Record<EventType, string> = {
  'access.granted': 'A user\'s resolved access to an Application flips from not allowed to allowed.',
  'access.revoked': 'A user\'s resolved access to an Application flips from allowed to not allowed.',
  'entitlement.granted': 'An Entitlement is created or returned to active.',
  'entitlement.disabled': 'An Entitlement\'s status is set to disabled.',
  'entitlement.revoked': 'An Entitlement\'s status is set to revoked.',
  'entitlement.expired': 'An Entitlement\'s ends_at passed.',
  'entitlement.updated': 'An Entitlement\'s ends_at, source or order_id changed without a status change.',
  'entitlement.member_scope_changed': 'An organization-wide grant\'s member_scope or member_overrides changed.',
  'entitlement.deleted': 'An Entitlement is hard-deleted.',
  'role.assigned': 'A role assignment is created.',
  'role.removed': 'A role assignment is deleted.',
  'user.suspended': 'A user is suspended.',
  'user.reactivated': 'A user is reactivated or restored.',
  'user.deleted': 'A user is deleted.',
  'organization.member_added': 'An active membership begins (pending invitations fire nothing).',
  'organization.member_removed': 'An active membership is removed.',
  'application.review_status_changed': 'An Application is approved, rejected, suspended or reinstated.',
  'webhook.test': 'POST /v1/webhooks/{id}/test.',
};

const HEADERS: [string, string, Record<string, unknown>][] = [
  [SIGNATURE_HEADER, '`t=<unix seconds>,v1=<hex>` (two v1 entries during a secret rotation): v1 is the hex HMAC-SHA256 of `<t>.<raw body>` keyed with the signing secret. Compare each v1 in constant time, accept if any matches, reject a t more than 5 minutes old.', { type: 'string' }],
  ['Platform-Event-Id', 'The event id (`wev_`), stable across attempts and redeliveries: deduplicate on it.', { type: 'string' }],
  ['Platform-Event-Type', 'The event type.', { type: 'string' }],
  ['Platform-Delivery-Id', 'This delivery\'s id.', { type: 'string' }],
  ['Platform-Delivery-Attempt', `The attempt number, 1 to ${MAX_ATTEMPTS}.`, { type: 'integer', minimum: 1 }],
];

/**
 * The OpenAPI 3.1 `webhooks` section: one POST per event type, the envelope with its `data`, the
 * headers a receiver verifies, and what the answer means (Part B, Webhook envelope and headers,
 * Delivery semantics). Generated clients and receivers read the payloads from here.
 */
export function webhookDescriptions(): Record<string, unknown> {
  return Object.fromEntries(EVENT_TYPES.map((type) => [type, {
    post: {
      operationId: `Webhook${type.split(/[^A-Za-z0-9]+/).map((w) => w[0].toUpperCase() + w.slice(1)).join('')}`,
      summary: type,
      description: `${WHEN[type]} Delivered at least once, in no guaranteed order: use created_at to drop stale events${type.startsWith('entitlement.') ? ' (and the entitlement\'s updated_at)' : ''}.`,
      parameters: HEADERS.map(([name, description, schema]) => ({ name, in: 'header', required: true, description, schema })),
      requestBody: {
        required: true,
        content: {
          'application/json': {
            schema: object({
              id: { type: 'string', pattern: '^wev_', description: 'The event id, stable across attempts.' },
              type: { type: 'string', const: type },
              api_version: str('The payload version the subscription is pinned to.'),
              created_at: { type: 'string', format: 'date-time' },
              application_id: nullableStr('The Application the event is about, null for platform-wide events.'),
              test_mode: { type: 'boolean' },
              data: dataOf(type),
            }),
          },
        },
      },
      responses: {
        '2XX': { description: `Received: any 2xx within ${DELIVERY_TIMEOUT_MS / 1000} seconds. Anything else, a redirect included, is retried (+1 m, +5 m, +30 m, +2 h, +12 h).` },
        '410': { description: 'Gone: the subscription is disabled.' },
      },
    },
  }]));
}
