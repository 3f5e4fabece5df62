-- Foundation: clock, signing keys, accounts core, credentials, audit, outboxes, idempotency,
-- counters and the job scheduler. Moded tables carry test_mode and a row-level security policy:
-- connections of the app role see only the rows of the mode they were opened for.

CREATE TABLE dev_clock (
  id boolean PRIMARY KEY DEFAULT true CHECK (id),
  offset_ms bigint NOT NULL DEFAULT 0
);
INSERT INTO dev_clock (id, offset_ms) VALUES (true, 0);

CREATE TABLE signing_keys (
  kid text PRIMARY KEY,
  alg text NOT NULL,
  public_jwk jsonb NOT NULL,
  private_jwk jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  retired_at timestamptz
);

CREATE TABLE users (
  id text PRIMARY KEY,
  email text NOT NULL,
  email_verified boolean NOT NULL DEFAULT false,
  pending_email text,
  status text NOT NULL CHECK (status IN ('active', 'invited', 'suspended', 'deleted')),
  signup_application_id text,
  test_mode boolean NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  last_login_at timestamptz,
  deleted_at timestamptz
);
CREATE UNIQUE INDEX users_email_live_key ON users (test_mode, lower(email)) WHERE status <> 'deleted';
CREATE INDEX users_list_idx ON users (test_mode, created_at DESC, id DESC);

CREATE TABLE identities (
  id text PRIMARY KEY,
  user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  method text NOT NULL CHECK (method IN ('password', 'sso')),
  password_hash text,
  totp_secret text,
  totp_confirmed_at timestamptz,
  created_at timestamptz NOT NULL,
  last_used_at timestamptz,
  UNIQUE (user_id, method)
);

CREATE TABLE profiles (
  user_id text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
  display_name text NOT NULL,
  avatar_url text,
  contact_email text,
  contact_phone text,
  updated_at timestamptz NOT NULL
);

CREATE TABLE settings (
  user_id text PRIMARY KEY REFERENCES users (id) ON DELETE CASCADE,
  theme text NOT NULL DEFAULT 'system',
  timezone text NOT NULL DEFAULT 'UTC',
  locale text NOT NULL DEFAULT 'en',
  notifications jsonb NOT NULL DEFAULT '{"email": true, "sms": false}',
  updated_at timestamptz NOT NULL
);

CREATE TABLE roles (
  id text PRIMARY KEY,
  name text NOT NULL,
  scope text NOT NULL,
  description text,
  permissions text[] NOT NULL DEFAULT '{}',
  seed boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  UNIQUE (scope, name)
);

-- Seed platform Roles. member and billing_admin contents are a project decision (docs/decisions.md).
INSERT INTO roles (id, name, scope, description, permissions, seed, created_at, updated_at) VALUES
  ('role_platform_superadmin', 'superadmin', 'platform', 'Every platform permission.',
   ARRAY['users.list', 'users.manage', 'entitlements.manage', 'applications.manage', 'roles.manage',
         'organizations.manage', 'billing.manage', 'billing.refund', 'audit.view', 'webhooks.manage',
         'api_keys.manage', 'tenants.manage'], true, now(), now()),
  ('role_platform_support', 'support', 'platform', 'Customer support.',
   ARRAY['users.list', 'entitlements.manage', 'audit.view', 'tenants.manage', 'billing.manage'], true, now(), now()),
  ('role_platform_billing_admin', 'billing_admin', 'platform', 'Platform billing administration.',
   ARRAY['billing.manage', 'billing.refund', 'audit.view'], true, now(), now()),
  ('role_platform_member', 'member', 'platform', 'Every user; grants no platform permission.',
   ARRAY[]::text[], true, now(), now());

CREATE TABLE role_assignments (
  user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  role_id text NOT NULL REFERENCES roles (id),
  application_id text,
  assigned_at timestamptz NOT NULL,
  assigned_by_type text,
  assigned_by_id text,
  PRIMARY KEY (user_id, role_id)
);
CREATE INDEX role_assignments_role_idx ON role_assignments (role_id);

CREATE TABLE sessions (
  id text PRIMARY KEY,
  user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  test_mode boolean NOT NULL,
  amr text[] NOT NULL,
  ip_address text,
  user_agent text,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  revoked_at timestamptz
);
CREATE INDEX sessions_user_idx ON sessions (user_id, created_at DESC);

CREATE TABLE refresh_tokens (
  id text PRIMARY KEY,
  session_id text NOT NULL REFERENCES sessions (id) ON DELETE CASCADE,
  token_hash text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL,
  idle_expires_at timestamptz NOT NULL,
  used_at timestamptz
);
CREATE INDEX refresh_tokens_session_idx ON refresh_tokens (session_id);

CREATE TABLE api_keys (
  id text PRIMARY KEY,
  name text NOT NULL,
  scope text NOT NULL,
  permissions text[] NOT NULL,
  test_mode boolean NOT NULL,
  intended_use text NOT NULL CHECK (intended_use IN ('service', 'agent')),
  restrict_destructive boolean NOT NULL,
  secret_hash text NOT NULL UNIQUE,
  secret_hint text NOT NULL,
  expires_at timestamptz,
  created_by_user_id text NOT NULL,
  last_used_at timestamptz,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  revoked_at timestamptz
);

CREATE TABLE audit_events (
  id text PRIMARY KEY,
  action text NOT NULL,
  actor_type text NOT NULL CHECK (actor_type IN ('user', 'api_key', 'system')),
  actor_id text,
  via_api_key_id text,
  target_type text,
  target_id text,
  target_user_id text,
  application_id text,
  organization_id text,
  tenant_id text,
  before jsonb,
  after jsonb,
  request_id text,
  test_mode boolean NOT NULL,
  created_at timestamptz NOT NULL
);
CREATE INDEX audit_events_time_idx ON audit_events (test_mode, created_at DESC, id DESC);
CREATE INDEX audit_events_target_user_idx ON audit_events (target_user_id, created_at DESC);

-- Transactional outbox: resource and access events written with the change, relayed after commit.
CREATE TABLE outbox_events (
  id text PRIMARY KEY,
  type text NOT NULL,
  application_id text,
  test_mode boolean NOT NULL,
  data jsonb NOT NULL,
  created_at timestamptz NOT NULL,
  relayed_at timestamptz
);
CREATE INDEX outbox_events_pending_idx ON outbox_events (created_at) WHERE relayed_at IS NULL;

-- The mail outbox: every message is written here in the transaction that caused it; a relay sends
-- it through SMTP after commit, or logs it when no SMTP server is configured.
CREATE TABLE emails (
  id text PRIMARY KEY,
  template text NOT NULL,
  to_address text NOT NULL,
  from_name text,
  subject text NOT NULL,
  text_body text NOT NULL,
  test_mode boolean NOT NULL,
  status text NOT NULL DEFAULT 'queued' CHECK (status IN ('queued', 'sent', 'logged', 'failed')),
  attempts integer NOT NULL DEFAULT 0,
  next_attempt_at timestamptz NOT NULL,
  claimed_until timestamptz,
  claim_token text,
  last_error text,
  created_at timestamptz NOT NULL,
  sent_at timestamptz
);
CREATE INDEX emails_pending_idx ON emails (next_attempt_at) WHERE status = 'queued';
CREATE INDEX emails_to_idx ON emails (lower(to_address), created_at DESC);

CREATE TABLE idempotency_keys (
  credential text NOT NULL,
  operation text NOT NULL,
  key text NOT NULL,
  request_hash text NOT NULL,
  status text NOT NULL CHECK (status IN ('in_flight', 'done')),
  response_status integer,
  response_body text,
  locked_until timestamptz NOT NULL,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (credential, operation, key)
);
CREATE INDEX idempotency_keys_expiry_idx ON idempotency_keys (expires_at);

-- Fixed-window counters shared by every process (rate limits, throttles, attempt counters).
CREATE TABLE counters (
  bucket text NOT NULL,
  window_start timestamptz NOT NULL,
  count integer NOT NULL,
  expires_at timestamptz NOT NULL,
  PRIMARY KEY (bucket, window_start)
);
CREATE INDEX counters_expiry_idx ON counters (expires_at);

CREATE TABLE jobs (
  name text PRIMARY KEY,
  next_run_at timestamptz NOT NULL,
  locked_until timestamptz,
  lock_token text,
  last_started_at timestamptz,
  last_finished_at timestamptz,
  last_error text,
  runs integer NOT NULL DEFAULT 0
);

-- Row-level security for the moded tables.
ALTER TABLE users ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON users
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));
ALTER TABLE audit_events ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON audit_events
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));
ALTER TABLE sessions ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON sessions
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));
