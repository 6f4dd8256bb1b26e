-- Chainsub schema v1.
--
-- Two families of tables, with one writer each:
--   * API-owned (merchants, keys, sessions, plans, checkouts, idempotency, webhook settings):
--     written by the `api` binary.
--   * Chain-owned (cursor, checkpoints, chain_events, chain_plans, subscriptions,
--     ledger_entries, webhook_outbox inserts): written only by the `indexer` sink, always in
--     one transaction per block (or batch of blocks), and fully reversible on a reorg.
-- Addresses are 20-byte BYTEA, hashes 32-byte BYTEA; token amounts are NUMERIC(78,0) base
-- units (uint256 fits); on-chain plan and subscription ids are BIGINT (the contract counts
-- from 1; the indexer refuses larger ids loudly rather than truncating).

-- ------------------------------------------------------------------ merchants and auth

CREATE TABLE merchants (
    id              BIGSERIAL PRIMARY KEY,
    public_id       TEXT NOT NULL UNIQUE,                -- mer_...
    wallet          BYTEA NOT NULL UNIQUE CHECK (length(wallet) = 20),
    code            TEXT NOT NULL UNIQUE,                -- short code in checkout URLs
    webhook_url     TEXT,
    webhook_enabled BOOLEAN NOT NULL DEFAULT TRUE,       -- false after a 410 until re-enabled
    webhook_disabled_reason TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Webhook signing secrets. The current one has expires_at NULL; after a rotation the old
-- one keeps signing until expires_at (the overlap window).
CREATE TABLE webhook_secrets (
    id          BIGSERIAL PRIMARY KEY,
    merchant_id BIGINT NOT NULL REFERENCES merchants(id) ON DELETE CASCADE,
    secret      TEXT NOT NULL,                            -- whsec_<base64>
    created_at  TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at  TIMESTAMPTZ
);
CREATE INDEX webhook_secrets_merchant ON webhook_secrets (merchant_id, created_at DESC);

CREATE TABLE api_keys (
    id           BIGSERIAL PRIMARY KEY,
    merchant_id  BIGINT NOT NULL REFERENCES merchants(id) ON DELETE CASCADE,
    key_hash     BYTEA NOT NULL UNIQUE CHECK (length(key_hash) = 32),  -- SHA3-256 of the key
    prefix       TEXT NOT NULL,                           -- e.g. sk_live_
    last4        TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_used_at TIMESTAMPTZ,
    revoked_at   TIMESTAMPTZ
);
-- At most one live key per merchant: rotation revokes and inserts in one transaction.
CREATE UNIQUE INDEX api_keys_one_live ON api_keys (merchant_id) WHERE revoked_at IS NULL;

-- SIWE nonces are single use: used_at is set in the same statement that checks it.
CREATE TABLE siwe_nonces (
    nonce      TEXT PRIMARY KEY,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at TIMESTAMPTZ NOT NULL,
    used_at    TIMESTAMPTZ
);

CREATE TABLE dashboard_sessions (
    id           BIGSERIAL PRIMARY KEY,
    session_hash BYTEA NOT NULL UNIQUE,                   -- SHA3-256 of the cookie value
    merchant_id  BIGINT NOT NULL REFERENCES merchants(id) ON DELETE CASCADE,
    csrf_token   TEXT NOT NULL,
    created_at   TIMESTAMPTZ NOT NULL DEFAULT now(),
    expires_at   TIMESTAMPTZ NOT NULL,
    revoked_at   TIMESTAMPTZ
);

-- ------------------------------------------------------------------ plans and checkouts

-- The API's plan row: the merchant's intent and the provisioning state. Whether it exists on
-- chain is told by chain_plans (joined on plan_ref); the receipt columns let the API answer
-- POST /plans before the indexer has caught up.
CREATE TABLE plans (
    id                  BIGSERIAL PRIMARY KEY,
    public_id           TEXT NOT NULL UNIQUE,             -- plan_...
    merchant_id         BIGINT NOT NULL REFERENCES merchants(id) ON DELETE CASCADE,
    name                TEXT NOT NULL,
    amount              NUMERIC(78, 0) NOT NULL CHECK (amount > 0),  -- USDC base units
    currency            TEXT NOT NULL CHECK (currency = 'USDC'),
    interval            TEXT NOT NULL CHECK (interval = 'month'),
    slug                TEXT NOT NULL,
    plan_ref            BYTEA NOT NULL UNIQUE CHECK (length(plan_ref) = 32),
    provision_status    TEXT NOT NULL DEFAULT 'pending'
                        CHECK (provision_status IN ('pending', 'submitted', 'active', 'failed')),
    provision_error     TEXT,
    provision_tx_hash   BYTEA,
    onchain_plan_id     BIGINT,
    provision_block_number BIGINT,
    provision_block_hash   BYTEA,
    provision_log_index    INTEGER,
    created_at          TIMESTAMPTZ NOT NULL DEFAULT now(),
    UNIQUE (merchant_id, slug)
);
CREATE INDEX plans_merchant ON plans (merchant_id, id DESC);

CREATE TABLE checkouts (
    id                   BIGSERIAL PRIMARY KEY,
    public_id            TEXT NOT NULL UNIQUE,            -- chk_...
    merchant_id          BIGINT NOT NULL REFERENCES merchants(id) ON DELETE CASCADE,
    plan_id              BIGINT NOT NULL REFERENCES plans(id) ON DELETE CASCADE,
    customer_external_id TEXT,
    -- bytes32 passed to subscribe(): ties the on-chain subscription to this merchant's
    -- customer without putting the raw external id on chain.
    customer_ref         BYTEA NOT NULL CHECK (length(customer_ref) = 32),
    url                  TEXT NOT NULL,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX checkouts_customer_ref ON checkouts (customer_ref);

-- Idempotency-Key replay store. A row with completed_at NULL is a request in flight.
CREATE TABLE idempotency_keys (
    scope         TEXT NOT NULL,                          -- e.g. 'mer_…' or 'session:<id>'
    key           TEXT NOT NULL,
    request_hash  BYTEA NOT NULL,                         -- method + path + body
    status_code   INTEGER,
    response_body TEXT,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    completed_at  TIMESTAMPTZ,
    PRIMARY KEY (scope, key)
);

-- ------------------------------------------------------------------ chain index (indexer)

-- Where the indexer is: the last block whose effects are committed.
CREATE TABLE indexer_cursor (
    chain_id     BIGINT PRIMARY KEY,
    contract     BYTEA NOT NULL,
    block_number BIGINT NOT NULL,
    block_hash   BYTEA NOT NULL,
    head_number  BIGINT,                                  -- chain head last seen (for lag)
    writer_epoch BIGINT NOT NULL DEFAULT 0,               -- fencing token of the lock holder
    updated_at   TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- Hashes of recent (unfinalized) blocks, to find the common ancestor on a reorg.
CREATE TABLE block_checkpoints (
    chain_id     BIGINT NOT NULL,
    block_number BIGINT NOT NULL,
    block_hash   BYTEA NOT NULL,
    parent_hash  BYTEA NOT NULL,
    block_time   TIMESTAMPTZ NOT NULL,
    PRIMARY KEY (chain_id, block_number)
);

-- Every SubscriptionManager log, decoded. The row is the fact; every projection below is a
-- function of these rows.
CREATE TABLE chain_events (
    id                BIGSERIAL PRIMARY KEY,
    public_id         TEXT NOT NULL UNIQUE,   -- evt_<hex of keccak(chain_id, tx_hash, log_index)>: stable across reorgs
    chain_id          BIGINT NOT NULL,
    contract          BYTEA NOT NULL,
    block_number      BIGINT NOT NULL,
    block_hash        BYTEA NOT NULL,
    block_time        TIMESTAMPTZ NOT NULL,
    transaction_hash  BYTEA NOT NULL,
    transaction_index INTEGER NOT NULL,
    log_index         INTEGER NOT NULL,
    name              TEXT NOT NULL,          -- Solidity event name
    kind              TEXT,                   -- API event type (subscription.*), NULL for plan/operator events
    merchant_wallet   BYTEA,
    subscription_id   BIGINT,                 -- on-chain subscription id
    plan_id           BIGINT,                 -- on-chain plan id
    topics            BYTEA[] NOT NULL,
    data              BYTEA NOT NULL,
    decoded           JSONB NOT NULL,         -- the log's fields by their Solidity names; uints as decimal strings, addresses/bytes32 as 0x hex
    -- The subscription as of this event (after applying it), written by the sink:
    -- {"id":"sub_…","status","cancelAtPeriodEnd","period","currentPeriodStart","currentPeriodEnd"
    --  (RFC 3339),"nextPaymentAt" (RFC 3339 or null when terminal),"failedAttempts",
    --  "subscriber" (0x…),"customerExternalId","amount" (base units, string),"planOnchainId"}
    snapshot          JSONB,
    enqueued          BOOLEAN NOT NULL DEFAULT FALSE,  -- outbox row written (confirmed)
    UNIQUE (chain_id, block_hash, log_index)
);
CREATE INDEX chain_events_block ON chain_events (chain_id, block_number);
CREATE INDEX chain_events_merchant ON chain_events (merchant_wallet, id DESC) WHERE kind IS NOT NULL;
CREATE INDEX chain_events_merchant_kind ON chain_events (merchant_wallet, kind, id DESC) WHERE kind IS NOT NULL;
CREATE INDEX chain_events_subscription ON chain_events (chain_id, subscription_id, id);
CREATE INDEX chain_events_unenqueued ON chain_events (chain_id, block_number) WHERE NOT enqueued AND kind IS NOT NULL;

CREATE TABLE chain_plans (
    chain_id        BIGINT NOT NULL,
    onchain_id      BIGINT NOT NULL,
    merchant_wallet BYTEA NOT NULL,
    plan_ref        BYTEA NOT NULL,
    amount          NUMERIC(78, 0) NOT NULL,
    created_by      BYTEA NOT NULL,
    event_id        BIGINT NOT NULL REFERENCES chain_events(id) ON DELETE CASCADE,
    PRIMARY KEY (chain_id, onchain_id)
);
CREATE INDEX chain_plans_ref ON chain_plans (plan_ref);

CREATE TABLE subscriptions (
    chain_id             BIGINT NOT NULL,
    onchain_id           BIGINT NOT NULL,
    public_id            TEXT NOT NULL UNIQUE,            -- sub_...
    merchant_wallet      BYTEA NOT NULL,
    subscriber           BYTEA NOT NULL,
    plan_onchain_id      BIGINT NOT NULL,
    amount               NUMERIC(78, 0) NOT NULL,
    customer_ref         BYTEA NOT NULL,
    customer_external_id TEXT,                            -- resolved through checkouts.customer_ref
    status               TEXT NOT NULL CHECK (status IN ('active', 'past_due', 'cancelled', 'ended')),
    cancel_at_period_end BOOLEAN NOT NULL DEFAULT FALSE,
    period               INTEGER NOT NULL,                -- 1-based index of the current paid period
    current_period_start TIMESTAMPTZ NOT NULL,
    current_period_end   TIMESTAMPTZ NOT NULL,
    failed_attempts      INTEGER NOT NULL DEFAULT 0,
    next_retry_at        TIMESTAMPTZ,
    ended_reason         TEXT,
    created_event_id     BIGINT NOT NULL REFERENCES chain_events(id) ON DELETE CASCADE,
    last_event_id        BIGINT NOT NULL REFERENCES chain_events(id),
    created_at           TIMESTAMPTZ NOT NULL,            -- block time of creation
    updated_at           TIMESTAMPTZ NOT NULL,            -- block time of the last event
    PRIMARY KEY (chain_id, onchain_id)
);
CREATE INDEX subscriptions_merchant ON subscriptions (merchant_wallet, onchain_id DESC);
CREATE INDEX subscriptions_merchant_status ON subscriptions (merchant_wallet, status, onchain_id DESC);
CREATE INDEX subscriptions_merchant_plan ON subscriptions (merchant_wallet, plan_onchain_id, onchain_id DESC);
CREATE INDEX subscriptions_merchant_customer ON subscriptions (merchant_wallet, customer_external_id, onchain_id DESC);
-- The keeper's scan: live subscriptions by due time.
CREATE INDEX subscriptions_due ON subscriptions (current_period_end) WHERE status IN ('active', 'past_due');

-- Charges and failed charges, one per SubscriptionCharged / PaymentFailed log.
CREATE TABLE ledger_entries (
    event_id        BIGINT PRIMARY KEY REFERENCES chain_events(id) ON DELETE CASCADE,
    chain_id        BIGINT NOT NULL,
    subscription_id BIGINT NOT NULL,                      -- on-chain id
    kind            TEXT NOT NULL CHECK (kind IN ('charge', 'failed_charge')),
    amount          NUMERIC(78, 0) NOT NULL,
    period          INTEGER NOT NULL,
    period_start    TIMESTAMPTZ,
    period_end      TIMESTAMPTZ,
    attempt         INTEGER NOT NULL,
    failure_reason  TEXT,
    block_time      TIMESTAMPTZ NOT NULL
);
CREATE INDEX ledger_entries_subscription ON ledger_entries (chain_id, subscription_id, event_id);

-- ------------------------------------------------------------------ webhooks

-- One row per confirmed lifecycle event (written by the indexer when the event's block
-- reaches CONFIRMATIONS) or per dashboard test event. Dispatchers claim due rows with
-- FOR UPDATE SKIP LOCKED.
CREATE TABLE webhook_outbox (
    id              BIGSERIAL PRIMARY KEY,
    event_public_id TEXT NOT NULL,
    merchant_wallet BYTEA NOT NULL,
    test_payload    JSONB,                                -- set for dashboard test events only
    status          TEXT NOT NULL DEFAULT 'pending'
                    CHECK (status IN ('pending', 'delivering', 'delivered', 'failed')),
    attempts        INTEGER NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    locked_until    TIMESTAMPTZ,
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    delivered_at    TIMESTAMPTZ
);
CREATE UNIQUE INDEX webhook_outbox_event ON webhook_outbox (event_public_id) WHERE test_payload IS NULL;
CREATE INDEX webhook_outbox_due ON webhook_outbox (next_attempt_at) WHERE status IN ('pending', 'delivering');
CREATE INDEX webhook_outbox_merchant ON webhook_outbox (merchant_wallet, id DESC);

CREATE TABLE webhook_attempts (
    id               BIGSERIAL PRIMARY KEY,
    outbox_id        BIGINT NOT NULL REFERENCES webhook_outbox(id) ON DELETE CASCADE,
    attempt          INTEGER NOT NULL,
    attempted_at     TIMESTAMPTZ NOT NULL DEFAULT now(),
    url              TEXT NOT NULL,
    status_code      INTEGER,
    latency_ms       INTEGER,
    error            TEXT,
    response_excerpt TEXT
);
CREATE INDEX webhook_attempts_outbox ON webhook_attempts (outbox_id, id);
