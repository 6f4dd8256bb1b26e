-- Batched renewals (issue 13, point 7): one keeper transaction may carry the steps of many
-- subscriptions (SubscriptionManager.chargeMany). `step_ids` lists every step a transaction
-- carries (`step_id` stays its first, for the foreign key); all steps of one send share its
-- nonce, so the steps in flight that share a nonce are one send. Its receipt decides each
-- step: acted on (a SubscriptionCharged, PaymentFailed or SubscriptionEnded for the id) or
-- skipped by the contract (closed without a tx hash, so it is taken up again).
ALTER TABLE keeper_txs ADD COLUMN step_ids BIGINT[];
UPDATE keeper_txs SET step_ids = ARRAY[step_id];
ALTER TABLE keeper_txs ALTER COLUMN step_ids SET NOT NULL,
    ADD CONSTRAINT keeper_txs_carries_its_step CHECK (step_ids[1] = step_id);
-- The transactions of one send: same nonce, overlapping steps.
CREATE INDEX keeper_txs_nonce ON keeper_txs (nonce);
-- The block a transaction was mined in: the reorg re-check walks transactions, not steps (a
-- `chargeMany` whose every id was skipped decided no step with its hash, and must still be
-- re-broadcast if a reorg drops it, or its nonce would become a gap).
ALTER TABLE keeper_txs ADD COLUMN block_number BIGINT;
UPDATE keeper_txs t SET block_number = k.block_number
FROM keeper_steps k WHERE k.tx_hash = t.tx_hash;
