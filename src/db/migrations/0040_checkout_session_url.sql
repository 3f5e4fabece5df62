-- A checkout session's URL, so that the loser of two checkouts of one Tenant at once hands out the
-- winner's (docs/decisions.md, "One payable checkout per Tenant") rather than its own, expired one.
-- Rows recorded before this migration, or by the release before it during a deploy, have none.
ALTER TABLE checkout_sessions ADD COLUMN IF NOT EXISTS url text;
-- When this service expired the session at the processor. Its row stays until its own expiry (not
-- deleted at once, as 0039's were): a retry with the same Idempotency-Key gets the same session back
-- from the processor, and must find it closed, not record it as the Tenant's payable checkout again.
ALTER TABLE checkout_sessions ADD COLUMN IF NOT EXISTS closed_at timestamptz(3);
