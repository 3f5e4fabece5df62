-- A pending delivery's schedule was set at its last attempt's start (before the first attempt, at its
-- creation): a retry lies there plus its attempt's back-off. One set further ahead of now than the skew
-- bound was set before the clock stepped back; the delivery pass finds those with one probe of this
-- index (an empty range unless the clock stepped back) and makes them due at once.
CREATE INDEX IF NOT EXISTS webhook_deliveries_set_at_idx ON webhook_deliveries ((COALESCE(last_attempt_at, created_at))) WHERE status = 'pending';

-- The TOTP replay guard's record (docs/decisions.md, "MFA enrollment"): the steps used from
-- totp_steps_from on, beside the latest (totp_last_step), so that after the clock stepped back a code
-- of the current step signs in while no step used passes twice. A row's record starts at its next code.
ALTER TABLE identities ADD COLUMN IF NOT EXISTS totp_used_steps bigint[] NOT NULL DEFAULT '{}';
ALTER TABLE identities ADD COLUMN IF NOT EXISTS totp_steps_from bigint;
