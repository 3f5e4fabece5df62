-- List cursors carry created_at to the millisecond (the API's precision, and the clock's for every row
-- the service writes), but 0001 stamped the seed Roles with now(), to the microsecond: a page ending
-- on a seed Role returned a cursor that sorted before it, so `GET /v1/roles` repeated that page
-- forever. The seeds get the millisecond their cursor names.
UPDATE roles SET created_at = date_trunc('milliseconds', created_at), updated_at = date_trunc('milliseconds', updated_at)
 WHERE seed AND (created_at <> date_trunc('milliseconds', created_at) OR updated_at <> date_trunc('milliseconds', updated_at));
