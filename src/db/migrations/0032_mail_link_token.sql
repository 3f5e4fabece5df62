-- The one-time token a queued mail's link carries (its hash, as one_time_tokens stores it), so the
-- relay sends a mail only while its link still works: a reset link replaced by a newer request, used,
-- voided or expired during an SMTP outage is not delivered dead. Mails queued before this migration
-- have none and are sent as before.
ALTER TABLE emails ADD COLUMN IF NOT EXISTS link_token_hash text;
