-- Cancellations a merchant asks for through the API (issue 14, point 2): the relayer sends
-- `cancel` or `cancelAtPeriodEnd` for the merchant (the contract lets the operator act on the
-- plans it created). Each row journals its transaction as signed, BEFORE the broadcast (hash,
-- nonce, fees), as plans do: a crash never loses a cancellation nor sends it twice, since a
-- retry finds the row and replaces a stuck transaction at its nonce instead of queueing a
-- second one. The lifecycle event itself comes from the chain through the indexer.
CREATE TABLE subscription_cancellations (
    id                     BIGSERIAL PRIMARY KEY,
    merchant_id            BIGINT NOT NULL REFERENCES merchants (id),
    chain_id               BIGINT NOT NULL,
    onchain_id             BIGINT NOT NULL,
    subscription_public_id TEXT NOT NULL,
    at_period_end          BOOLEAN NOT NULL,
    -- sending: decided, nothing signed yet; submitted: signed and journaled (maybe
    -- broadcast); mined: its transaction succeeded; failed: not sent, or its transaction can
    -- never be mined.
    status                 TEXT NOT NULL
        CHECK (status IN ('sending', 'submitted', 'mined', 'failed')),
    tx_hash                BYTEA,
    -- The signed transaction itself: sent again as is when the node may never have seen it
    -- (a crash between the journal and the broadcast, or an unanswered broadcast).
    raw_tx                 BYTEA,
    -- Transactions signed for this request (the first and its replacements): replacements
    -- raise fees by 25 % each, so they are capped.
    sends                  INT NOT NULL DEFAULT 0,
    nonce                  BIGINT,
    max_fee_per_gas        NUMERIC(78, 0),
    priority_fee_per_gas   NUMERIC(78, 0),
    error                  TEXT,
    created_at             TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at             TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- At most one live request per subscription and kind: two concurrent requests never send two
-- transactions.
CREATE UNIQUE INDEX subscription_cancellations_live
    ON subscription_cancellations (chain_id, onchain_id, at_period_end)
    WHERE status <> 'failed';

-- The re-driver's scan: journaled transactions whose outcome is not known yet.
CREATE INDEX subscription_cancellations_unsettled
    ON subscription_cancellations (updated_at) WHERE status = 'submitted';
