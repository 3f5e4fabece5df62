-- The processor checkout sessions a Tenant's checkouts opened and whose completion has not been applied
-- (docs/decisions.md, "One payable checkout per Tenant"). A new checkout supersedes the Tenant's earlier
-- ones, which are expired at the processor, so that a second tab or a retry with a new key cannot be
-- paid beside it. A row goes when its checkout.session.completed is applied, when the processor has
-- expired it, and once its own expiry has passed.
CREATE TABLE IF NOT EXISTS checkout_sessions (
  id text PRIMARY KEY,
  tenant_id text NOT NULL REFERENCES tenants (id) ON DELETE CASCADE,
  created_at timestamptz(3) NOT NULL,
  expires_at timestamptz NOT NULL,
  superseded_at timestamptz
);
CREATE INDEX IF NOT EXISTS checkout_sessions_tenant_idx ON checkout_sessions (tenant_id);
