-- Bench data set shaped like the indexer's rows: one merchant with :subs subscriptions
-- (default 100,000) and ten times as many chain events (10 per subscription: created + 9
-- charges; 1,000,000 by default), their delivered webhook outbox rows, plus the plan rows
-- that resolve planId, all on chain :chain (default 31337; the indexer bench loads it on
-- another chain beside the one its sink writes). Subscription ids have the opaque shape
-- (`sub_<32 hex>`). Every subscription has a subscriber wallet of its own (as live data
-- does: a page of one wallet's subscriptions would let the API reuse one EIP-55 checksum
-- for every row). :wallet is the merchant wallet as a bytea literal.
\set ON_ERROR_STOP on
\if :{?subs}
\else
\set subs 100000
\endif
\if :{?chain}
\else
\set chain 31337
\endif
BEGIN;
INSERT INTO indexer_cursor (chain_id, contract, block_number, block_hash, head_number)
VALUES (:chain, '\xcccccccccccccccccccccccccccccccccccccccc', 200000, '\x00', 200000);

INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash, block_time,
    transaction_hash, transaction_index, log_index, name, kind, merchant_wallet, subscription_id,
    plan_id, topics, data, log_amount, log_subscriber, log_period, log_attempt, snap_id,
    snap_status, snap_cancel_at_period_end, snap_period, snap_period_start, snap_period_end,
    snap_next_payment_at, snap_failed_attempts, snap_subscriber, snap_customer_external_id,
    snap_amount, snap_plan_onchain_id, sequence)
SELECT 'evt_' || md5('e' || g),
       :chain,
       '\xcccccccccccccccccccccccccccccccccccccccc'::bytea,
       g / 10 + 1,
       decode(md5('b' || (g / 10 + 1)) || md5('B' || (g / 10 + 1)), 'hex'),
       timestamptz '2026-01-01' + make_interval(secs => g * 12),
       decode(md5('t' || g) || md5('T' || g), 'hex'),
       0,
       g % 10,
       CASE WHEN g % 10 = 0 THEN 'SubscriptionCreated' ELSE 'SubscriptionCharged' END,
       CASE WHEN g % 10 = 0 THEN 'subscription.created' ELSE 'subscription.charged' END,
       :wallet,
       g / 10 + 1,
       (g / 10) % 5 + 1,
       ARRAY['\x00'::bytea],
       '\x'::bytea,
       9990000,
       decode(md5('w' || (g / 10 + 1)) || left(md5('W' || (g / 10 + 1)), 8), 'hex'),
       g % 10 + 1,
       1,
       -- The subscription's snapshot (migration 0025's typed columns).
       'sub_' || md5('s' || (g / 10 + 1)), 'active', false, g % 10 + 1,
       timestamptz '2026-01-01T00:00:00Z', timestamptz '2026-02-01T00:00:00Z',
       timestamptz '2026-02-01T00:00:00Z', 0,
       decode(md5('w' || (g / 10 + 1)) || left(md5('W' || (g / 10 + 1)), 8), 'hex'),
       'cust-' || (g / 10 + 1), 9990000,
       (g / 10) % 5 + 1,
       g % 10 + 1
FROM generate_series(0, :subs * 10 - 1) g;

-- Five on-chain plans (their PlanCreated logs) tied to API plans by planRef.
INSERT INTO chain_events (public_id, chain_id, contract, block_number, block_hash, block_time,
    transaction_hash, transaction_index, log_index, name, kind, merchant_wallet, plan_id,
    topics, data, log_amount)
SELECT 'evt_plan' || p, :chain, '\xcccccccccccccccccccccccccccccccccccccccc'::bytea, 1,
       decode(md5('b1') || md5('B1'), 'hex'), timestamptz '2026-01-01',
       decode(md5('pt' || p) || md5('PT' || p), 'hex'), 0, 100 + p, 'PlanCreated', NULL,
       :wallet, p, ARRAY['\x00'::bytea], '\x'::bytea, 9990000
FROM generate_series(1, 5) p;
INSERT INTO chain_plans (chain_id, onchain_id, merchant_wallet, plan_ref, amount, created_by, event_id)
SELECT :chain, p, :wallet, decode(md5('ref' || p) || md5('REF' || p), 'hex'), 9990000, :wallet,
       (SELECT id FROM chain_events WHERE public_id = 'evt_plan' || p)
FROM generate_series(1, 5) p;
INSERT INTO plans (public_id, merchant_id, name, amount, currency, interval, slug, plan_ref,
    provision_status, onchain_plan_id)
SELECT 'plan_bench' || p, (SELECT id FROM merchants WHERE wallet = :wallet), 'Plan ' || p,
       9990000, 'USDC', 'month', 'plan-' || p, decode(md5('ref' || p) || md5('REF' || p), 'hex'),
       'active', p
FROM generate_series(1, 5) p;

INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet, subscriber,
    plan_onchain_id, amount, customer_ref, customer_external_id, status, period,
    current_period_start, current_period_end, created_event_id, last_event_id, created_at,
    updated_at, event_count)
SELECT :chain, s, 'sub_' || md5('s' || s), :wallet,
       decode(md5('w' || s) || left(md5('W' || s), 8), 'hex'),
       (s - 1) % 5 + 1, 9990000, ('\x' || repeat('00', 32))::bytea, 'cust-' || s,
       CASE WHEN s % 50 = 0 THEN 'past_due' ELSE 'active' END, 10,
       timestamptz '2026-01-01', timestamptz '2026-02-01',
       e.id, e.id + 9, e.block_time, e.block_time, 10
FROM generate_series(1, :subs) s
JOIN chain_events e ON e.public_id = 'evt_' || md5('e' || ((s - 1) * 10));

INSERT INTO ledger_entries (event_id, chain_id, subscription_id, kind, amount, period,
    period_start, period_end, attempt, block_time)
SELECT id, :chain, subscription_id, 'charge', 9990000, log_period,
       timestamptz '2026-01-01', timestamptz '2026-02-01', 1, block_time
FROM chain_events WHERE kind = 'subscription.charged' AND chain_id = :chain;

-- Every event confirmed and its webhook delivered, as in a live system: the events list
-- reads each event's delivery state.
INSERT INTO webhook_outbox (event_id, event_public_id, merchant_wallet, status, attempts, delivered_at)
SELECT id, public_id, merchant_wallet, 'delivered', 1, block_time + interval '1 second'
FROM chain_events WHERE kind IS NOT NULL AND chain_id = :chain;
COMMIT;
ANALYZE;
