-- A Profile's updated_at is its own (and its locale's, which Settings holds): until 2026-11-30 the
-- Profile showed the later of its own and its Settings row's, so a theme change moved it. Profiles
-- keep the value they showed, so no client sees one go back.
UPDATE profiles p SET updated_at = s.updated_at FROM settings s WHERE s.user_id = p.user_id AND s.updated_at > p.updated_at;
