-- When a disabled subscription was last set back to healthy: it receives only events written from
-- then on, so an event written while it was disabled is not delivered even when the relay reaches
-- it after the re-enable (Part B: missed events are not backfilled). Null: never re-enabled.
ALTER TABLE webhook_subscriptions ADD COLUMN reenabled_at timestamptz(3);
