-- List cursors are (created_at, id) with created_at to the millisecond, the API's precision and the
-- clock's. A row stamped to the microsecond (SQL now(), as 0001 did for the seed Roles, or a row an
-- operator inserts by hand) sorted after its own cursor, so a walk repeated it forever. Every
-- created_at column now holds milliseconds (timestamptz(3) rounds what is written to it).
DO $$
DECLARE c record;
BEGIN
  FOR c IN
    SELECT table_name FROM information_schema.columns
     WHERE table_schema = current_schema() AND column_name = 'created_at'
       AND data_type = 'timestamp with time zone' AND datetime_precision > 3
     ORDER BY table_name
  LOOP
    EXECUTE format('ALTER TABLE %I ALTER COLUMN created_at TYPE timestamptz(3)', c.table_name);
  END LOOP;
END $$;
