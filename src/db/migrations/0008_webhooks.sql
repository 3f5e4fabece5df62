-- Webhook subscriptions and their deliveries (the consumer of the transactional outbox), plus the
-- append-only guard of the audit log.

CREATE TABLE webhook_subscriptions (
  id text PRIMARY KEY,
  -- `platform` or the Application id; application_id repeats it for app scope (null for platform).
  scope text NOT NULL,
  application_id text REFERENCES applications (id),
  url text NOT NULL,
  events text[] NOT NULL,
  description text,
  status text NOT NULL CHECK (status IN ('healthy', 'unhealthy', 'disabled')),
  -- HMAC keys must be usable, so they are stored as given (protect the database like the signing keys).
  signing_secret text NOT NULL,
  previous_secret text,
  previous_secret_expires_at timestamptz,
  api_version text NOT NULL,
  test_mode boolean NOT NULL,
  -- Consecutive deliveries that exhausted every retry; reset by a successful delivery.
  consecutive_failures integer NOT NULL DEFAULT 0,
  unhealthy_since timestamptz,
  disabled_at timestamptz,
  disabled_reason text,
  last_delivery_at timestamptz,
  -- Who is mailed when a platform-scope subscription is disabled (the creating user, or the key's creator).
  created_by_user_id text,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  CHECK ((scope = 'platform') = (application_id IS NULL))
);
CREATE INDEX webhook_subscriptions_list_idx ON webhook_subscriptions (test_mode, created_at DESC, id DESC);
CREATE INDEX webhook_subscriptions_app_idx ON webhook_subscriptions (application_id);
CREATE INDEX webhook_subscriptions_unhealthy_idx ON webhook_subscriptions (unhealthy_since) WHERE status = 'unhealthy';
ALTER TABLE webhook_subscriptions ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON webhook_subscriptions
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));

-- One row per (event, subscription) delivery, test call or redelivery; it carries its retry state.
-- No foreign key to outbox_events: the test purge removes old test events on its own schedule.
CREATE TABLE webhook_deliveries (
  id text PRIMARY KEY,
  subscription_id text NOT NULL REFERENCES webhook_subscriptions (id) ON DELETE CASCADE,
  event_id text NOT NULL,
  event_type text NOT NULL,
  kind text NOT NULL CHECK (kind IN ('event', 'test', 'redelivery')),
  test_mode boolean NOT NULL,
  status text NOT NULL CHECK (status IN ('pending', 'succeeded', 'failed')),
  attempt integer NOT NULL DEFAULT 0,
  max_attempts integer NOT NULL,
  next_attempt_at timestamptz,
  claimed_until timestamptz,
  claim_token text,
  last_attempt_at timestamptz,
  response_status integer,
  duration_ms integer,
  error text,
  created_at timestamptz NOT NULL,
  completed_at timestamptz
);
CREATE INDEX webhook_deliveries_due_idx ON webhook_deliveries (next_attempt_at) WHERE status = 'pending';
CREATE INDEX webhook_deliveries_log_idx ON webhook_deliveries (subscription_id, created_at DESC, id DESC);
CREATE INDEX webhook_deliveries_prune_idx ON webhook_deliveries (created_at);
ALTER TABLE webhook_deliveries ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON webhook_deliveries
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));

CREATE INDEX outbox_events_relayed_idx ON outbox_events (relayed_at) WHERE relayed_at IS NOT NULL;

-- The audit log is append-only: what happened (action, actor, target, scope ids, request, time) can
-- never change. Two paths stay open: erasure redacts the before/after snapshots, and the test purge
-- deletes old test-mode rows.
CREATE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF OLD.test_mode THEN RETURN OLD; END IF;
    RAISE EXCEPTION 'audit_events is append-only' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF (NEW.id, NEW.action, NEW.actor_type, NEW.actor_id, NEW.via_api_key_id, NEW.target_type, NEW.target_id, NEW.target_user_id,
      NEW.application_id, NEW.organization_id, NEW.tenant_id, NEW.request_id, NEW.test_mode, NEW.created_at)
     IS DISTINCT FROM
     (OLD.id, OLD.action, OLD.actor_type, OLD.actor_id, OLD.via_api_key_id, OLD.target_type, OLD.target_id, OLD.target_user_id,
      OLD.application_id, OLD.organization_id, OLD.tenant_id, OLD.request_id, OLD.test_mode, OLD.created_at) THEN
    RAISE EXCEPTION 'audit_events is append-only (only before/after may be redacted)' USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
CREATE TRIGGER audit_events_append_only BEFORE UPDATE OR DELETE ON audit_events
  FOR EACH ROW EXECUTE FUNCTION audit_events_append_only();
