-- The delivery claim looks per subscription when the oldest due deliveries all belong to
-- subscriptions that have no room (a receiver that hangs, with a backlog): it finds each
-- subscription's oldest pending delivery with one probe of this index instead of reading the backlog.
CREATE INDEX IF NOT EXISTS webhook_deliveries_sub_due_idx ON webhook_deliveries (subscription_id, next_attempt_at, id) WHERE status = 'pending';
