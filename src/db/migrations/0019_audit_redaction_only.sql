-- audit_events is append-only (docs/security.md). The only changes ever made to a row: the erasure
-- cascade replaces a non-null before/after with {"redacted": true}, and the nightly purge deletes test
-- rows. Nothing else, not even by the owner: a null snapshot stays null, no other value is written.
-- (The request role may neither update nor delete: src/db/migrate.ts.)
CREATE OR REPLACE FUNCTION audit_events_append_only() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  IF TG_OP = 'DELETE' THEN
    IF OLD.test_mode THEN RETURN OLD; END IF;
    RAISE EXCEPTION 'audit_events is append-only' USING ERRCODE = 'insufficient_privilege';
  END IF;
  IF (NEW.id, NEW.action, NEW.actor_type, NEW.actor_id, NEW.via_api_key_id, NEW.target_type, NEW.target_id, NEW.target_user_id,
      NEW.application_id, NEW.organization_id, NEW.tenant_id, NEW.request_id, NEW.test_mode, NEW.created_at)
     IS DISTINCT FROM
     (OLD.id, OLD.action, OLD.actor_type, OLD.actor_id, OLD.via_api_key_id, OLD.target_type, OLD.target_id, OLD.target_user_id,
      OLD.application_id, OLD.organization_id, OLD.tenant_id, OLD.request_id, OLD.test_mode, OLD.created_at)
     OR (NEW.before IS DISTINCT FROM OLD.before AND (OLD.before IS NULL OR NEW.before IS DISTINCT FROM '{"redacted": true}'::jsonb))
     OR (NEW.after IS DISTINCT FROM OLD.after AND (OLD.after IS NULL OR NEW.after IS DISTINCT FROM '{"redacted": true}'::jsonb)) THEN
    RAISE EXCEPTION 'audit_events is append-only (a snapshot may only be redacted)' USING ERRCODE = 'insufficient_privilege';
  END IF;
  RETURN NEW;
END $$;
