-- Renewal-at-risk warnings (issue 14, point 3). A configurable time before a renewal falls
-- due the keeper reads the subscriber's USDC balance and allowance to the manager at the
-- latest block, once per subscription and period (`renewal_checks`); when either cannot cover
-- the next charge (with the wallet's other charges due no later) it records a `subscription.renewal_at_risk` event per reason
-- (`renewal_risks`), listed by GET /api/v1/events and delivered by webhook. These are the
-- service's OBSERVATIONS of chain state, not contract logs: they have no transaction and no
-- log index, and are never part of a reconciliation of on-chain events. Their ids come from
-- the chain_events sequence, so the events list interleaves them with the others in the
-- order the service learned of them.
CREATE TABLE renewal_checks (
    chain_id        BIGINT NOT NULL,
    subscription_id BIGINT NOT NULL,              -- on-chain id
    period          INTEGER NOT NULL,             -- the period whose charge falls due next
    block_number    BIGINT NOT NULL,
    block_hash      BYTEA NOT NULL,
    balance         NUMERIC(78, 0) NOT NULL,
    allowance       NUMERIC(78, 0) NOT NULL,
    checked_at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (chain_id, subscription_id, period)
);

CREATE TABLE renewal_risks (
    id              BIGINT PRIMARY KEY DEFAULT nextval('chain_events_id_seq'),
    public_id       TEXT NOT NULL UNIQUE,
    chain_id        BIGINT NOT NULL,
    contract        BYTEA NOT NULL,
    merchant_wallet BYTEA NOT NULL,
    subscription_id BIGINT NOT NULL,              -- on-chain id
    plan_id         BIGINT NOT NULL,              -- on-chain id
    period          INTEGER NOT NULL,             -- the period whose charge is at risk
    reason          TEXT NOT NULL CHECK (reason IN ('allowance', 'balance')),
    amount          NUMERIC(78, 0) NOT NULL,      -- the charge due
    -- What the wallet needs by the due date: this charge and those of the wallet's other
    -- live subscriptions due no later (balance and allowance are shared by them all).
    required        NUMERIC(78, 0) NOT NULL,
    available       NUMERIC(78, 0) NOT NULL,      -- the balance or allowance observed
    due_at          TIMESTAMPTZ NOT NULL,
    block_number    BIGINT NOT NULL,              -- where it was observed
    block_hash      BYTEA NOT NULL,
    block_time      TIMESTAMPTZ NOT NULL,
    snapshot        JSONB,                        -- the subscription as last indexed
    observed_at     TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    UNIQUE (chain_id, subscription_id, period, reason)
);
CREATE INDEX renewal_risks_merchant ON renewal_risks (merchant_wallet, id DESC);
CREATE INDEX renewal_risks_subscription ON renewal_risks (chain_id, subscription_id, id);
