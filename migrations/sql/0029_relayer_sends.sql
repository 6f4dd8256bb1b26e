-- Every transaction the API's relayer signs for a merchant — a plan's createPlan, a
-- cancellation, and each replacement of either at its nonce — one row. It bounds the
-- relayer's spend: a merchant's sends per day (RELAYER_SENDS_PER_MERCHANT_PER_DAY), and how
-- often and how soon one transaction is replaced (RELAYER_MAX_REPLACEMENTS,
-- RELAYER_REPLACE_AFTER_SECS).
CREATE TABLE relayer_sends (
    id               BIGSERIAL PRIMARY KEY,
    merchant_id      BIGINT NOT NULL REFERENCES merchants(id),
    kind             TEXT NOT NULL CHECK (kind IN ('create_plan', 'cancel')),
    -- plans.id or subscription_cancellations.id, by kind
    row_id           BIGINT NOT NULL,
    nonce            BIGINT NOT NULL,
    tx_hash          BYTEA NOT NULL CHECK (length(tx_hash) = 32),
    max_fee_per_gas  NUMERIC NOT NULL,
    sent_at          TIMESTAMPTZ NOT NULL DEFAULT now()
);
-- The daily quota: a merchant's sends since a time.
CREATE INDEX relayer_sends_merchant ON relayer_sends (merchant_id, sent_at);
-- The replacement rules: the sends of one row at one nonce.
CREATE INDEX relayer_sends_row ON relayer_sends (kind, row_id, nonce);
