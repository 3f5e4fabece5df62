-- The Applications a user.* or organization.member_* event reaches through app-scope webhooks: those
-- the user has an access path to when the event is written (docs/decisions.md "Webhook routing").
-- NULL for every other event, and for rows written before this column existed.
ALTER TABLE outbox_events ADD COLUMN path_application_ids text[];

-- Events not yet relayed when this runs are routed as they would have been written now.
UPDATE outbox_events ev SET path_application_ids = ARRAY(
  SELECT p.application_id FROM entitlements p WHERE p.user_id = ev.data->>'user_id'
  UNION
  SELECT e.application_id FROM entitlements e JOIN organization_members m ON m.organization_id = e.organization_id
   WHERE m.user_id = ev.data->>'user_id' AND m.membership_status = 'active'
     AND NOT (e.member_scope = 'allowlist' AND NOT (m.user_id = ANY(COALESCE(e.member_overrides, '{}'))))
     AND NOT (e.member_scope = 'denylist' AND m.user_id = ANY(COALESCE(e.member_overrides, '{}')))
     AND NOT EXISTS (SELECT 1 FROM org_seat_limits l WHERE l.entitlement_id = e.id AND l.user_id = m.user_id))
 WHERE ev.relayed_at IS NULL AND ev.application_id IS NULL AND ev.data ? 'user_id'
   AND (starts_with(ev.type, 'user.') OR starts_with(ev.type, 'organization.member_'));
