-- tenants.status_subscription_id for the Tenants whose status was set before 0029 recorded it. Left
-- null, their subscription had no protection from its own late events: a Tenant canceled before the
-- upgrade got Team back from a customer.subscription.updated of the same second delivered after it (the
-- processor retries the deliveries a stopped server missed, in any order), and a late
-- customer.subscription.created undid the newer state of its subscription.
--
-- An applied subscription event links the Tenant to its subscription (stripe_subscription_id); only a
-- checkout.session.completed links another one without an event of its own, and only while the status
-- lets a new subscription be checked out (none, canceled, incomplete_expired, unpaid). So the linked
-- subscription's own event set the status when one was applied and either the status is not one of
-- those or no checkout was applied after that event. Otherwise (a new subscription checked out whose
-- events have not arrived) the column stays null, as before, so that the new subscription's
-- customer.subscription.created still applies. Only null rows change: a database already at 0029 keeps
-- every value the service recorded.
UPDATE tenants t SET status_subscription_id = t.stripe_subscription_id
 WHERE t.status_subscription_id IS NULL
   AND t.stripe_subscription_id IS NOT NULL
   AND EXISTS (
     SELECT 1 FROM processor_events s
      WHERE s.tenant_id = t.id AND s.outcome = 'applied'
        AND s.type IN ('customer.subscription.created', 'customer.subscription.updated', 'customer.subscription.deleted')
        AND (t.subscription_status NOT IN ('none', 'canceled', 'incomplete_expired', 'unpaid')
             OR NOT EXISTS (
               SELECT 1 FROM processor_events c
                WHERE c.tenant_id = t.id AND c.outcome = 'applied' AND c.type = 'checkout.session.completed'
                  AND c.received_at >= s.received_at)));
