-- The processor subscription whose own event (customer.subscription.created, .updated or .deleted)
-- last set tenants.subscription_status. Events carry `created` in whole seconds, so several events of
-- one subscription often tie; what that subscription's state already is settles them: its
-- customer.subscription.created is the oldest word on it, and canceled and incomplete_expired are
-- final. Null: not known (rows written before this column; set by the next subscription event).
ALTER TABLE tenants ADD COLUMN status_subscription_id text;
