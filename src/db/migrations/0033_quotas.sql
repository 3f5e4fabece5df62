-- Test calls and redeliveries still waiting, per subscription: POST /v1/webhooks/{id}/test and
-- …/redeliver count them (at most 10 wait at once) without reading the subscription's 30-day log.
CREATE INDEX IF NOT EXISTS webhook_deliveries_manual_pending_idx ON webhook_deliveries (subscription_id) WHERE status = 'pending' AND kind <> 'event';

-- The idempotency-prune job deletes sessions 30 days past their 90-day end (with their tokens, by
-- cascade) without reading every session.
CREATE INDEX IF NOT EXISTS sessions_expires_idx ON sessions (expires_at);
