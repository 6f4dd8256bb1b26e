-- The renewal keeper's send journal (written only by the `keeper` binary).
--
-- keeper_steps: one row per due step the keeper acted on. A step is "charge period P, attempt
-- A" of one subscription (P = subscriptions.period + 1, A = failed_attempts + 1) or "end at
-- period end" (attempt 0) for a cancel-at-period-end subscription. The UNIQUE key is the
-- guarantee that the keeper never sends twice for one step, also across restarts: the row
-- (with its nonce and the signed transaction) is committed BEFORE the transaction is
-- broadcast, so a keeper that dies anywhere resumes the row instead of starting a new send.
--
-- keeper_txs: every signed transaction of a step. All rows of a step share its nonce: a
-- stuck transaction is replaced by a higher-fee one with the SAME nonce, so at most one of
-- them can ever be mined.
CREATE TABLE keeper_steps (
    id              BIGSERIAL PRIMARY KEY,
    chain_id        BIGINT NOT NULL,
    contract        BYTEA NOT NULL CHECK (length(contract) = 20),
    subscription_id BIGINT NOT NULL,                        -- on-chain id
    period          INTEGER NOT NULL,                       -- the period being charged
    attempt         INTEGER NOT NULL CHECK (attempt >= 0),  -- 0 = the end step
    action          TEXT NOT NULL CHECK (action IN ('charge', 'end')),
    keeper_address  BYTEA NOT NULL CHECK (length(keeper_address) = 20),
    nonce           BIGINT NOT NULL,
    -- pending: persisted, broadcast not yet acknowledged; sent: in the node's pool;
    -- mined: receipt with status 1; failed: reverted on chain, or can never be mined.
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'sent', 'mined', 'failed')),
    tx_hash         BYTEA,                                  -- the transaction that was mined
    block_number    BIGINT,
    error           TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    finished_at     TIMESTAMPTZ,
    UNIQUE (chain_id, subscription_id, period, attempt)
);
CREATE INDEX keeper_steps_open ON keeper_steps (chain_id, nonce) WHERE status IN ('pending', 'sent');

CREATE TABLE keeper_txs (
    id                       BIGSERIAL PRIMARY KEY,
    step_id                  BIGINT NOT NULL REFERENCES keeper_steps(id) ON DELETE CASCADE,
    nonce                    BIGINT NOT NULL,
    tx_hash                  BYTEA NOT NULL UNIQUE CHECK (length(tx_hash) = 32),
    raw_tx                   BYTEA NOT NULL,                -- EIP-2718 bytes, re-broadcast on resume
    gas_limit                BIGINT NOT NULL,
    max_fee_per_gas          NUMERIC(78, 0) NOT NULL,
    max_priority_fee_per_gas NUMERIC(78, 0) NOT NULL,
    -- pending: signed and persisted, not acknowledged by the node; sent: acknowledged;
    -- mined / failed: has a receipt (status 1 / 0), or failed = rejected and never in a pool;
    -- replaced: superseded by a higher-fee transaction with the same nonce.
    status                   TEXT NOT NULL DEFAULT 'pending'
                             CHECK (status IN ('pending', 'sent', 'mined', 'failed', 'replaced')),
    gas_used                 BIGINT,
    effective_gas_price      NUMERIC(78, 0),
    fee_paid_wei             NUMERIC(78, 0),                -- gas_used * effective_gas_price
    error                    TEXT,
    created_at               TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at                  TIMESTAMPTZ,
    updated_at               TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX keeper_txs_step ON keeper_txs (step_id, id);
-- The gas budget sums the fees of the transactions signed in the current window.
CREATE INDEX keeper_txs_created ON keeper_txs (created_at);
