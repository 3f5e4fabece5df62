-- Tenancy and billing: the Tenant's processor subscription mirror, tier-change requests, processed
-- payment-processor events (idempotency by event id) and the local processor simulator's sessions.

ALTER TABLE tenants
  ADD COLUMN stripe_customer_id text,
  ADD COLUMN stripe_subscription_id text,
  -- The plan of the processor subscription's price (lookup_key), kept while a lapse drops `plan` to starter.
  ADD COLUMN processor_plan text,
  ADD COLUMN current_period_start timestamptz,
  ADD COLUMN current_period_end timestamptz,
  ADD COLUMN cancel_at_period_end boolean NOT NULL DEFAULT false,
  ADD COLUMN seats_synced integer,
  ADD COLUMN seats_last_synced_at timestamptz,
  -- `created` of the last processor event applied to the subscription: older events are stale.
  ADD COLUMN last_processor_event_created timestamptz,
  ADD COLUMN add_ons jsonb NOT NULL DEFAULT '[]',
  ADD COLUMN currency text NOT NULL DEFAULT 'usd';
CREATE INDEX tenants_list_idx ON tenants (created_at DESC, id DESC);
CREATE INDEX tenants_stripe_customer_idx ON tenants (stripe_customer_id) WHERE stripe_customer_id IS NOT NULL;
CREATE INDEX tenants_stripe_subscription_idx ON tenants (stripe_subscription_id) WHERE stripe_subscription_id IS NOT NULL;

CREATE TABLE tier_change_requests (
  id text PRIMARY KEY,
  tenant_id text NOT NULL REFERENCES tenants (id),
  from_tier text NOT NULL,
  from_region text NOT NULL,
  requested_tier text NOT NULL CHECK (requested_tier IN ('shared', 'isolated', 'dedicated_region')),
  requested_region text,
  status text NOT NULL CHECK (status IN ('pending', 'scheduled', 'in_progress', 'completed', 'cancelled')),
  reason text NOT NULL,
  scheduled_for timestamptz,
  notes text,
  requested_by text,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  started_at timestamptz,
  completed_at timestamptz
);
-- One open request per Tenant (the service checks under a row lock; this is the backstop).
CREATE UNIQUE INDEX tier_change_requests_open_key ON tier_change_requests (tenant_id)
  WHERE status IN ('pending', 'scheduled', 'in_progress');
CREATE INDEX tier_change_requests_tenant_idx ON tier_change_requests (tenant_id, created_at DESC, id DESC);

CREATE TABLE processor_events (
  id text PRIMARY KEY,
  type text NOT NULL,
  created timestamptz NOT NULL,
  tenant_id text,
  outcome text NOT NULL CHECK (outcome IN ('applied', 'stale', 'ignored')),
  received_at timestamptz NOT NULL
);
CREATE INDEX processor_events_tenant_idx ON processor_events (tenant_id, received_at DESC);

CREATE TABLE billing_simulator_sessions (
  id text PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('checkout', 'portal')),
  tenant_id text NOT NULL REFERENCES tenants (id),
  plan text,
  success_url text,
  cancel_url text,
  return_url text,
  customer_email text,
  status text NOT NULL DEFAULT 'open' CHECK (status IN ('open', 'completed', 'cancelled')),
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  finished_at timestamptz
);
