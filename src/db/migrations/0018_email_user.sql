-- The user a mail is about, so that erasure removes exactly that user's mails (docs/decisions.md
-- "Erasure"): not another account's that reused the address, and also those to earlier addresses.
ALTER TABLE emails ADD COLUMN user_id text;
CREATE INDEX emails_user_idx ON emails (user_id) WHERE user_id IS NOT NULL;
