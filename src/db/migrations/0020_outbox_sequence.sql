-- The order events were written in: a transaction that waited for another's locks writes its events
-- after that one committed, so for conflicting changes (a member joining while the grant is revoked)
-- seq follows the order of the commits, where created_at (the request's start) may not.
ALTER TABLE outbox_events ADD COLUMN seq bigserial;
DROP INDEX IF EXISTS outbox_events_pending_idx;
CREATE INDEX outbox_events_pending_idx ON outbox_events (seq) WHERE relayed_at IS NULL;
