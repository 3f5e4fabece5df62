-- Sign-in: one-time tokens, TOTP state, recovery codes, identity lockout, and the Application
-- catalog table (its API arrives with the applications module; signup already brands mail with it).

CREATE TABLE one_time_tokens (
  id text PRIMARY KEY,
  kind text NOT NULL CHECK (kind IN ('email_verification', 'email_change', 'password_reset', 'invitation', 'mfa_challenge')),
  token_hash text NOT NULL UNIQUE,
  user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  test_mode boolean NOT NULL,
  data jsonb NOT NULL DEFAULT '{}',
  attempts integer NOT NULL DEFAULT 0,
  created_at timestamptz NOT NULL,
  expires_at timestamptz NOT NULL,
  used_at timestamptz
);
CREATE INDEX one_time_tokens_user_idx ON one_time_tokens (user_id, kind);

ALTER TABLE identities
  ADD COLUMN totp_pending_secret text,
  ADD COLUMN totp_last_step bigint,
  ADD COLUMN failed_attempts integer NOT NULL DEFAULT 0,
  ADD COLUMN first_failed_at timestamptz,
  ADD COLUMN locked_until timestamptz,
  ADD COLUMN updated_at timestamptz;

CREATE TABLE recovery_codes (
  id text PRIMARY KEY,
  user_id text NOT NULL REFERENCES users (id) ON DELETE CASCADE,
  code_hash text NOT NULL,
  created_at timestamptz NOT NULL,
  used_at timestamptz,
  UNIQUE (user_id, code_hash)
);

ALTER TABLE refresh_tokens ADD COLUMN parent_id text;

CREATE TABLE tenants (
  id text PRIMARY KEY,
  owner_type text NOT NULL CHECK (owner_type IN ('user', 'organization')),
  owner_user_id text,
  owner_organization_id text,
  tier text NOT NULL DEFAULT 'shared',
  plan text NOT NULL,
  region text NOT NULL DEFAULT 'us-east-1',
  status text NOT NULL DEFAULT 'active',
  suspended boolean NOT NULL DEFAULT false,
  subscription_status text NOT NULL DEFAULT 'none',
  restricted boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);

CREATE TABLE applications (
  id text PRIMARY KEY,
  slug text NOT NULL UNIQUE,
  name text NOT NULL,
  description text,
  icon_url text,
  launch_url text NOT NULL,
  redirect_uris text[] NOT NULL DEFAULT '{}',
  support_url text,
  email_from_name text,
  settings_schema jsonb NOT NULL DEFAULT '{}',
  permissions jsonb NOT NULL DEFAULT '[]',
  available_app_roles text[] NOT NULL DEFAULT '{}',
  default_app_role text,
  visibility text NOT NULL DEFAULT 'public',
  owner_user_id text,
  owner_organization_id text,
  review_status text NOT NULL DEFAULT 'approved',
  review_notes text,
  tenant_id text NOT NULL REFERENCES tenants (id),
  test_mode boolean NOT NULL DEFAULT false,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL
);
CREATE INDEX applications_list_idx ON applications (created_at DESC, id DESC);
