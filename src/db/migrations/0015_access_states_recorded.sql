-- access_states.updated_at now means "announced as of" for every pair a change considers, not only
-- for pairs that flipped (docs/decisions.md "Time-driven flips"). Rows written before carry the time
-- of their last flip; from then on, changes that did not flip the pair went unrecorded, so replaying
-- time from that instant could announce a stale step. Everything recorded so far holds as of now: a
-- flip time caused and not yet announced is still found by the next sweep (resolution differs from
-- the record) and announced with reason entitlement_expired or entitlement_started.
UPDATE access_states SET updated_at = now();
