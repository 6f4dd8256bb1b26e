-- SubscriptionManager v2 (issue 11).
--
-- Plan references are scoped per merchant on chain, so two merchants may register the same
-- planRef: the API's plan is the chain plan with its reference AND its merchant's wallet.
-- The lookup index covers both.
DROP INDEX chain_plans_ref;
CREATE INDEX chain_plans_ref ON chain_plans (plan_ref, merchant_wallet);

-- A plan deactivated on chain takes no new subscriptions. The column names the
-- PlanDeactivated log; a reorg that removes that log sets it back to NULL (active again).
ALTER TABLE chain_plans
    ADD COLUMN deactivated_event_id BIGINT REFERENCES chain_events(id) ON DELETE SET NULL;
