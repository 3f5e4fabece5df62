-- A checkout session whose checkout.session.completed was applied before its subscription's own event
-- (docs/decisions.md, "One payable checkout per Tenant"; the processor's events come in any order). Its
-- row stays, marked completed with the subscription the event names, until an event of that
-- subscription is applied or its own expiry has passed: meanwhile the Tenant is subscribing, and a new
-- checkout is 409 subscription_exists (until 2026-12-03 the row went at once, with the Tenant still
-- `none`, and a checkout in that window was handed a second payable session).
ALTER TABLE checkout_sessions ADD COLUMN IF NOT EXISTS completed_at timestamptz(3);
ALTER TABLE checkout_sessions ADD COLUMN IF NOT EXISTS subscription_id text;
