-- Members an organization-wide grant reaches beyond a Starter Tenant's seat cap (Part B: "on a
-- Starter Tenant at its seat cap member_decision reads seat_limit and gives no access"). A row marks
-- one (grant, member) pair: the member is listed under the grant with member_decision seat_limit, is
-- not a seat and gets no access through it. Rows are written when a grant first reaches a member over
-- the cap and removed when seats free up or the plan lifts the cap (oldest marks first).
CREATE TABLE org_seat_limits (
  entitlement_id text NOT NULL REFERENCES entitlements(id) ON DELETE CASCADE,
  user_id text NOT NULL REFERENCES users(id) ON DELETE CASCADE,
  created_at timestamptz NOT NULL,
  PRIMARY KEY (entitlement_id, user_id)
);
CREATE INDEX org_seat_limits_user ON org_seat_limits (user_id);
