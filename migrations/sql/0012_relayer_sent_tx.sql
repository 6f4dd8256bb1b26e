-- The relayer's last provisioning transaction of a plan, as sent (issue 11, point 7): its
-- nonce and fees, so a transaction stuck in the pool (fees below what blocks now take) is
-- replaced at the SAME nonce with higher fees, instead of a new send queued behind it.
ALTER TABLE plans
    ADD COLUMN provision_nonce                BIGINT,
    ADD COLUMN provision_max_fee_per_gas      NUMERIC(78, 0),
    ADD COLUMN provision_priority_fee_per_gas NUMERIC(78, 0);
