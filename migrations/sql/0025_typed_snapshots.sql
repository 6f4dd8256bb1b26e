-- Each event's subscription snapshot as typed columns instead of JSON text (issues 13 and 10).
-- The snapshot was the largest part of an event row: ~400 bytes of JSON per subscription
-- event (keys, RFC 3339 strings, a checksummed address, a decimal amount), written by the
-- sink as text, checked for validity by Postgres on every insert and parsed again by the
-- API on every events page and webhook body. The same twelve fields as columns take ~130
-- bytes and are read without parsing. Same names in the three tables that carry a snapshot
-- (chain events, retractions, renewal-at-risk observations), so a retraction or an
-- observation copies its event's columns as they are. A row has all of the required ones or
-- none (no snapshot: a subscription created before the indexer's start block);
-- `snap_next_payment_at` (none once terminal) and `snap_customer_external_id` may be NULL in
-- a snapshot. `indexer verify` still compares each stored snapshot with the fold's.
SET LOCAL lock_timeout = '5s';
-- First, the writer epoch moves on: an indexer still running the previous release (which
-- writes the JSON column) is fenced at its next batch; its batch in flight, which holds the
-- cursor row, finishes first (or, held past lock_timeout, makes this migration give up: run it
-- again).
UPDATE indexer_cursor SET writer_epoch = writer_epoch + 1;

DO $migration$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY '{chain_events,event_retractions,renewal_risks}'::regclass[] LOOP
        EXECUTE format($f$
            ALTER TABLE %1$s
                ADD COLUMN snap_id                   TEXT,           -- sub_…
                ADD COLUMN snap_status               TEXT CHECK (snap_status IN ('active', 'past_due', 'cancelled', 'ended')),
                ADD COLUMN snap_cancel_at_period_end BOOLEAN,
                ADD COLUMN snap_period               INTEGER CHECK (snap_period >= 0),
                ADD COLUMN snap_period_start         TIMESTAMPTZ,
                ADD COLUMN snap_period_end           TIMESTAMPTZ,
                ADD COLUMN snap_next_payment_at      TIMESTAMPTZ,    -- NULL once terminal
                ADD COLUMN snap_failed_attempts      SMALLINT CHECK (snap_failed_attempts BETWEEN 0 AND 255),
                ADD COLUMN snap_subscriber           BYTEA CHECK (octet_length(snap_subscriber) = 20),
                ADD COLUMN snap_customer_external_id TEXT,
                ADD COLUMN snap_amount               NUMERIC(78, 0), -- base units
                ADD COLUMN snap_plan_onchain_id      BIGINT,
                ADD CONSTRAINT %2$I CHECK (num_nulls(snap_id, snap_status,
                    snap_cancel_at_period_end, snap_period, snap_period_start, snap_period_end,
                    snap_failed_attempts, snap_subscriber, snap_amount, snap_plan_onchain_id)
                    IN (0, 10))$f$,
            t, t::text || '_snapshot_whole');
        -- Each stored text parsed once (json_to_record), not once per field.
        EXECUTE format($f$
            UPDATE %s SET (snap_id, snap_status, snap_cancel_at_period_end, snap_period,
                    snap_period_start, snap_period_end, snap_next_payment_at,
                    snap_failed_attempts, snap_subscriber, snap_customer_external_id,
                    snap_amount, snap_plan_onchain_id) =
                (SELECT j.id, j.status, j."cancelAtPeriodEnd", j.period, j."currentPeriodStart",
                        j."currentPeriodEnd", j."nextPaymentAt", j."failedAttempts",
                        decode(substr(j.subscriber, 3), 'hex'), j."customerExternalId",
                        j.amount, j."planOnchainId"
                 FROM json_to_record(snapshot) AS j(id text, status text,
                     "cancelAtPeriodEnd" boolean, period integer,
                     "currentPeriodStart" timestamptz, "currentPeriodEnd" timestamptz,
                     "nextPaymentAt" timestamptz, "failedAttempts" smallint, subscriber text,
                     "customerExternalId" text, amount numeric, "planOnchainId" bigint))
            WHERE snapshot IS NOT NULL$f$, t);
        EXECUTE format('ALTER TABLE %s DROP COLUMN snapshot', t);
    END LOOP;
END $migration$;
