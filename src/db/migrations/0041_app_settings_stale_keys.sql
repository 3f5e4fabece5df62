-- stale_override_counts without checking every stored row on every read (docs/decisions.md, Settings):
-- each AppSettings row carries the keys of its overrides that do not validate (stale_keys, a JSON
-- array of names), judged against the settings_schema whose stamp is stale_schema (the sha256 of its
-- text) while the row's updated_at was stale_at. A read counts with one aggregate the rows whose stamp
-- still holds (their Application's schema has that stamp, their updated_at is stale_at) and judges the
-- others itself: rows from before this migration (NULL), and rows the release before it wrote or whose
-- schema it changed during a deploy (it sets none of these columns).
ALTER TABLE app_settings ADD COLUMN IF NOT EXISTS stale_keys jsonb;
ALTER TABLE app_settings ADD COLUMN IF NOT EXISTS stale_schema text;
ALTER TABLE app_settings ADD COLUMN IF NOT EXISTS stale_at timestamptz;
-- The reads and the restamping of a schema change select an Application's rows.
CREATE INDEX IF NOT EXISTS app_settings_application_idx ON app_settings (application_id);
