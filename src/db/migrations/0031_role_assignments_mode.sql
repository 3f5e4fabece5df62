-- A Role's assignment_count counts the holders of the reader's mode (a Role is shared by both modes,
-- users are not). It was counted by joining every assignment to its user row, whose row-level security
-- says the mode: about 75 ms per 100,000 holders, so `GET /v1/roles` took 300 ms at 100k users (every
-- user holds `member`). Each assignment now carries its user's mode, copied from the user by the
-- database on insert (a user's mode never changes, so no writer can forget or contradict it), and the
-- count is an index-only scan of (role_id, test_mode).
ALTER TABLE role_assignments ADD COLUMN IF NOT EXISTS test_mode boolean;
UPDATE role_assignments ra SET test_mode = u.test_mode FROM users u WHERE u.id = ra.user_id AND ra.test_mode IS NULL;
ALTER TABLE role_assignments ALTER COLUMN test_mode SET NOT NULL;

-- Runs as the inserting role: under the request role the user must be visible in the request's mode
-- (else test_mode stays null and the insert fails), as the system scope sees every user.
CREATE OR REPLACE FUNCTION role_assignments_mode() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  SELECT u.test_mode INTO NEW.test_mode FROM users u WHERE u.id = NEW.user_id;
  RETURN NEW;
END $$;
DROP TRIGGER IF EXISTS role_assignments_mode ON role_assignments;
CREATE TRIGGER role_assignments_mode BEFORE INSERT ON role_assignments
  FOR EACH ROW EXECUTE FUNCTION role_assignments_mode();

CREATE INDEX IF NOT EXISTS role_assignments_role_mode_idx ON role_assignments (role_id, test_mode);
DROP INDEX IF EXISTS role_assignments_role_idx;
