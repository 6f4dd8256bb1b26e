-- Generated from store/src/events.rs (events::statements): what Postgres runs, one clause per line.
-- A test keeps this file equal to the code; CHAINSUB_WRITE_GENERATED=1 cargo test -p chainsub-store rewrites it.
SELECT LEAST((
    SELECT min(r.id)
    FROM event_retractions r
    WHERE r.merchant_wallet = $1 AND r.chain_id = $2::bigint AND $3::text IS NOT NULL AND $3 = 'event.retracted' AND ($4::text IS NULL OR r.snap_id = $4) AND ($5::bigint IS NULL OR r.block_number >= $5) AND ($6::bigint IS NULL OR r.block_number <= $6) AND ($7::timestamptz IS NULL OR r.detected_at >= $7) AND ($8::timestamptz IS NULL OR r.detected_at < $8) AND r.id > $9::bigint), (
    SELECT min(k.id)
    FROM renewal_risks k
    WHERE k.merchant_wallet = $1 AND k.chain_id = $2::bigint AND $3::text IS NOT NULL AND $3 = (CASE WHEN k.reason = 'trial_will_end' THEN 'subscription.trial_will_end' ELSE 'subscription.renewal_at_risk' END) AND ($4::text IS NULL OR k.subscription_id = (
        SELECT s.onchain_id
        FROM subscriptions s
        WHERE s.public_id = $4 AND s.merchant_wallet = $1 AND s.chain_id = $2)) AND ($5::bigint IS NULL OR k.block_number >= $5) AND ($6::bigint IS NULL OR k.block_number <= $6) AND ($7::timestamptz IS NULL OR k.block_time >= $7) AND ($8::timestamptz IS NULL OR k.block_time < $8) AND k.id > $9::bigint)) AS nearest_other,
  ce.id,
  ce.public_id,
  ce.kind,
  ce.block_time,
  ce.chain_id,
  ce.contract,
  ce.block_number,
  ce.block_hash,
  ce.transaction_hash,
  ce.log_index,
  ce.subscription_id,
  ce.log_amount::text AS log_amount,
  ce.log_subscriber,
  ce.log_period::text AS log_period,
  ce.log_attempt::text AS log_attempt,
  ce.log_reason::text AS log_reason,
  ce.log_next_retry_at::text AS log_next_retry_at,
  ce.snap_id,
  ce.snap_status,
  ce.snap_cancel_at_period_end,
  ce.snap_period,
  ce.snap_period_start,
  ce.snap_period_end,
  ce.snap_next_payment_at,
  ce.snap_failed_attempts,
  ce.snap_subscriber,
  ce.snap_customer_external_id,
  ce.snap_amount::text AS snap_amount,
  ce.snap_plan_onchain_id,
  ce.snap_trial_end,
  ce.snap_pending_plan_onchain_id,
  ce.snap_pending_amount::text AS snap_pending_amount,
  p.public_id AS plan_public_id,
  pp.public_id AS pending_plan_public_id,
  (
  SELECT cur.block_number
  FROM indexer_cursor cur
  WHERE cur.chain_id = $2) AS indexed_block,
  CASE WHEN o.status = 'pending' AND o.locked_until > now() THEN 'delivering' ELSE o.status END AS delivery_status,
  o.attempts AS delivery_attempts,
  o.next_attempt_at AS delivery_next_attempt_at,
  o.delivered_at AS delivery_delivered_at,
  o.last_error AS delivery_last_error,
  ce.sequence AS subscription_sequence,
  NULL::text AS retracted_event_id,
  NULL::text AS retracted_kind,
  NULL::bigint AS ancestor_block,
  NULL::bytea AS ancestor_hash,
  NULL::text AS risk_reason,
  NULL::text AS risk_amount,
  NULL::text AS risk_required,
  NULL::text AS risk_available,
  NULL::timestamptz AS risk_due_at,
  NULL::integer AS risk_period
FROM chain_events ce
LEFT JOIN chain_plans cp ON cp.chain_id = ce.chain_id AND cp.onchain_id = ce.plan_id
LEFT JOIN plans p ON p.plan_ref = cp.plan_ref AND p.merchant_id = $11
LEFT JOIN chain_plans pcp ON pcp.chain_id = ce.chain_id AND pcp.onchain_id = ce.snap_pending_plan_onchain_id
LEFT JOIN plans pp ON pp.plan_ref = pcp.plan_ref AND pp.merchant_id = $11
LEFT JOIN webhook_outbox o ON o.event_id = ce.id AND o.test_payload IS NULL AND o.retracted_at IS NULL
WHERE ce.merchant_wallet = $1 AND ce.kind IS NOT NULL AND ce.chain_id = $2::bigint AND $3::text IS NOT NULL AND ce.kind = $3 AND ($4::text IS NULL OR ce.subscription_id = (
    SELECT s.onchain_id
    FROM subscriptions s
    WHERE s.public_id = $4 AND s.merchant_wallet = $1 AND s.chain_id = $2)) AND ($5::bigint IS NULL OR ce.block_number >= $5) AND ($6::bigint IS NULL OR ce.block_number <= $6) AND ($7::timestamptz IS NULL OR ce.block_time >= $7) AND ($8::timestamptz IS NULL OR ce.block_time < $8) AND ce.id > $9::bigint
ORDER BY ce.id ASC
LIMIT $10
