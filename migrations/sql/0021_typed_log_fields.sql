-- Typed log fields instead of the `decoded` JSON (issue 13, point 1). `decoded` was a second
-- rendering of every log (its topics and data decode to it), parsed into jsonb by Postgres on
-- every insert, ~100-300 bytes per row, and read only for the six fields events serve. Those
-- are now columns; NULL where the event has no such field (and for a log that does not
-- decode). `indexer verify` compares them with the chain's logs.
ALTER TABLE chain_events
    ADD COLUMN log_amount        NUMERIC(78,0),  -- plan and subscription events' amount
    ADD COLUMN log_subscriber    BYTEA,          -- subscription events' subscriber
    ADD COLUMN log_period        BIGINT,         -- SubscriptionCharged, PaymentFailed (uint32)
    ADD COLUMN log_attempt       INTEGER,        -- SubscriptionCharged, PaymentFailed (uint8)
    ADD COLUMN log_reason        INTEGER,        -- PaymentFailed, SubscriptionEnded (uint8)
    ADD COLUMN log_next_retry_at NUMERIC(20,0);  -- PaymentFailed (uint64, unix seconds)
UPDATE chain_events SET
    log_amount = (decoded->>'amount')::numeric,
    log_subscriber = decode(substr(decoded->>'subscriber', 3), 'hex'),
    log_period = (decoded->>'period')::bigint,
    log_attempt = (decoded->>'attempt')::integer,
    log_reason = (decoded->>'reason')::integer,
    log_next_retry_at = (decoded->>'nextRetryAt')::numeric
 WHERE decoded ?| ARRAY['amount', 'subscriber'];
ALTER TABLE chain_events DROP COLUMN decoded;

-- A retraction keeps the removed event's content as it was served.
ALTER TABLE event_retractions
    ADD COLUMN log_amount        NUMERIC(78,0),
    ADD COLUMN log_subscriber    BYTEA,
    ADD COLUMN log_period        BIGINT,
    ADD COLUMN log_attempt       INTEGER,
    ADD COLUMN log_reason        INTEGER,
    ADD COLUMN log_next_retry_at NUMERIC(20,0);
UPDATE event_retractions SET
    log_amount = (decoded->>'amount')::numeric,
    log_subscriber = decode(substr(decoded->>'subscriber', 3), 'hex'),
    log_period = (decoded->>'period')::bigint,
    log_attempt = (decoded->>'attempt')::integer,
    log_reason = (decoded->>'reason')::integer,
    log_next_retry_at = (decoded->>'nextRetryAt')::numeric
 WHERE decoded ?| ARRAY['amount', 'subscriber'];
ALTER TABLE event_retractions DROP COLUMN decoded;
