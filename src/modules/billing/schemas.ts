import { Type, type Static } from '@sinclair/typebox';
import { Nullable, NullableTimestamp, OpenEnum, Timestamp } from '../../http/schemas.js';
import { PLAN_NAMES, SUBSCRIPTION_STATUSES } from '../tenancy/schemas.js';

export const Subscription = Type.Object(
  {
    tenant_id: Type.String(),
    plan: OpenEnum(PLAN_NAMES),
    subscription_status: OpenEnum(SUBSCRIPTION_STATUSES),
    restricted: Type.Boolean(),
    current_period_start: NullableTimestamp,
    current_period_end: NullableTimestamp,
    cancel_at_period_end: Type.Boolean(),
    seats: Type.Object({
      current: Type.Integer(),
      included: Nullable(Type.Integer()),
      billable: Type.Integer(),
      last_synced_at: NullableTimestamp,
    }),
    add_ons: Type.Array(Type.Object({ code: OpenEnum(['isolated_tenancy', 'dedicated_region_tenancy'] as const), amount: Type.Integer() })),
    currency: Type.String({ description: 'Lowercase ISO 4217 code.' }),
  },
  { $id: 'Subscription', title: 'Subscription' },
);
export type Subscription = Static<typeof Subscription>;

const Url = Type.String({ minLength: 1, maxLength: 2048 });

export const CheckoutBody = Type.Object(
  {
    plan: Type.Union([Type.Literal('team'), Type.Literal('enterprise')], { description: 'Only team; enterprise is sold by sales (422 plan_requires_sales).' }),
    success_url: Url,
    cancel_url: Url,
  },
  { additionalProperties: false },
);
export type CheckoutBody = Static<typeof CheckoutBody>;

export const PortalBody = Type.Object({ return_url: Url }, { additionalProperties: false });
export type PortalBody = Static<typeof PortalBody>;

export const HostedSession = Type.Object(
  { url: Type.String({ description: 'The hosted payment-processor page to send the user to.' }), expires_at: Timestamp },
  { $id: 'HostedSession', title: 'HostedSession' },
);
export type HostedSession = Static<typeof HostedSession>;

export const Received = Type.Object({ received: Type.Boolean() });
