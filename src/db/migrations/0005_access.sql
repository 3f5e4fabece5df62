-- Applications, entitlements and roles: what the access module adds on top of the catalog tables.
ALTER TABLE entitlements ADD COLUMN start_notified_at timestamptz;
CREATE INDEX entitlements_ends_idx ON entitlements (ends_at) WHERE status IN ('active', 'disabled') AND ends_at IS NOT NULL;
CREATE INDEX entitlements_starts_idx ON entitlements (starts_at) WHERE status = 'active' AND start_notified_at IS NULL;
CREATE INDEX entitlements_user_idx ON entitlements (user_id, application_id);
CREATE INDEX entitlements_org_idx ON entitlements (organization_id, application_id);
CREATE INDEX applications_review_idx ON applications (review_status, created_at);
CREATE INDEX applications_owner_user_idx ON applications (owner_user_id);
CREATE INDEX applications_owner_org_idx ON applications (owner_organization_id);
CREATE INDEX role_assignments_user_idx ON role_assignments (user_id, application_id);
CREATE UNIQUE INDEX tenants_owner_user_key ON tenants (owner_user_id) WHERE owner_user_id IS NOT NULL;
CREATE UNIQUE INDEX tenants_owner_org_key ON tenants (owner_organization_id) WHERE owner_organization_id IS NOT NULL;
