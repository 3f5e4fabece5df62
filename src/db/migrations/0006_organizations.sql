-- Organizations: member listing and name search.
CREATE INDEX organization_members_org_idx ON organization_members (organization_id, membership_status, role);
CREATE INDEX organizations_name_idx ON organizations (test_mode, lower(name) text_pattern_ops);
CREATE INDEX organizations_list_idx ON organizations (test_mode, created_at DESC, id DESC);
