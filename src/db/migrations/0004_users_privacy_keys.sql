-- Users: erasure requests; profile search; API key scope lookups.
CREATE TABLE erasure_requests (
  user_id text PRIMARY KEY REFERENCES users (id),
  status text NOT NULL CHECK (status IN ('scheduled', 'cancelled', 'completed')),
  reason text,
  requested_at timestamptz NOT NULL,
  scheduled_for timestamptz NOT NULL,
  requested_by_type text NOT NULL,
  requested_by_id text,
  cancelled_at timestamptz,
  completed_at timestamptz
);
CREATE INDEX erasure_requests_due_idx ON erasure_requests (scheduled_for) WHERE status = 'scheduled';

CREATE INDEX profiles_display_name_idx ON profiles (lower(display_name) text_pattern_ops);
CREATE INDEX users_email_prefix_idx ON users (test_mode, lower(email) text_pattern_ops);
CREATE INDEX api_keys_scope_idx ON api_keys (scope, created_at DESC);

-- Entitlements (personal and organization-wide grants); the access resolver reads them.
CREATE TABLE entitlements (
  id text PRIMARY KEY,
  user_id text REFERENCES users (id),
  organization_id text,
  application_id text NOT NULL REFERENCES applications (id),
  status text NOT NULL CHECK (status IN ('active', 'disabled', 'revoked', 'expired')),
  source text NOT NULL CHECK (source IN ('purchase', 'trial', 'admin_grant', 'org_seat')),
  order_id text,
  starts_at timestamptz NOT NULL,
  ends_at timestamptz,
  disabled_reason text,
  member_scope text CHECK (member_scope IN ('all_members', 'allowlist', 'denylist')),
  member_overrides text[],
  test_mode boolean NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  CHECK ((user_id IS NULL) <> (organization_id IS NULL))
);
CREATE UNIQUE INDEX entitlements_live_personal_key ON entitlements (user_id, application_id)
  WHERE user_id IS NOT NULL AND status IN ('active', 'disabled');
CREATE UNIQUE INDEX entitlements_live_org_key ON entitlements (organization_id, application_id)
  WHERE organization_id IS NOT NULL AND status IN ('active', 'disabled');
CREATE INDEX entitlements_app_idx ON entitlements (application_id, created_at DESC, id DESC);
CREATE INDEX entitlements_list_idx ON entitlements (test_mode, created_at DESC, id DESC);
ALTER TABLE entitlements ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON entitlements
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));

-- Organizations and memberships (the organizations module builds on these).
CREATE TABLE organizations (
  id text PRIMARY KEY,
  name text NOT NULL,
  status text NOT NULL DEFAULT 'active' CHECK (status IN ('active', 'suspended')),
  created_by text NOT NULL,
  test_mode boolean NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
ALTER TABLE organizations ENABLE ROW LEVEL SECURITY;
CREATE POLICY mode_isolation ON organizations
  USING (test_mode = (current_setting('app.test_mode', true) = 'on'))
  WITH CHECK (test_mode = (current_setting('app.test_mode', true) = 'on'));

CREATE TABLE organization_members (
  organization_id text NOT NULL REFERENCES organizations (id),
  user_id text NOT NULL REFERENCES users (id),
  role text NOT NULL CHECK (role IN ('org_admin', 'member')),
  membership_status text NOT NULL CHECK (membership_status IN ('pending', 'active')),
  invited_at timestamptz NOT NULL,
  joined_at timestamptz,
  PRIMARY KEY (organization_id, user_id)
);
CREATE INDEX organization_members_user_idx ON organization_members (user_id);

ALTER TABLE users ADD COLUMN erased_at timestamptz;

-- Per-user, per-Application data (AppProfile and AppSettings overrides).
CREATE TABLE app_profiles (
  user_id text NOT NULL REFERENCES users (id),
  application_id text NOT NULL REFERENCES applications (id),
  display_handle text,
  custom jsonb NOT NULL DEFAULT '{}',
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (user_id, application_id)
);
CREATE TABLE app_settings (
  user_id text NOT NULL REFERENCES users (id),
  application_id text NOT NULL REFERENCES applications (id),
  overrides jsonb NOT NULL DEFAULT '{}',
  updated_at timestamptz NOT NULL,
  PRIMARY KEY (user_id, application_id)
);
