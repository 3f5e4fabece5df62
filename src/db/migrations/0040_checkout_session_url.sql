-- A checkout session's URL, so that the loser of two checkouts of one Tenant at once hands out the
-- winner's (docs/decisions.md, "One payable checkout per Tenant") rather than its own, expired one.
-- Rows recorded before this migration, or by the release before it during a deploy, have none.
ALTER TABLE checkout_sessions ADD COLUMN IF NOT EXISTS url text;
