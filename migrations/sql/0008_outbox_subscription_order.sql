-- Webhooks of one subscription are delivered in chain order: a later event of a
-- subscription is not attempted while an earlier one is still pending or being delivered
-- (issue 12, point 7). The outbox row names its subscription so the dispatcher's claim can
-- check that with an index probe instead of a join per candidate.
ALTER TABLE webhook_outbox
    ADD COLUMN chain_id        BIGINT,
    ADD COLUMN subscription_id BIGINT;   -- on-chain id; NULL for plan events and test events

UPDATE webhook_outbox o SET chain_id = e.chain_id, subscription_id = e.subscription_id
FROM chain_events e
WHERE e.public_id = o.event_public_id AND o.test_payload IS NULL;

-- Earlier undelivered rows of a subscription, by outbox id (rows are enqueued in chain order).
CREATE INDEX webhook_outbox_subscription_open
    ON webhook_outbox (chain_id, subscription_id, id)
    WHERE status IN ('pending', 'delivering') AND subscription_id IS NOT NULL;
