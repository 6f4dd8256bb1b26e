-- Retractions (issue 12, point 6): when a reorg deeper than CONFIRMATIONS removes an event
-- whose webhook was already attempted, the merchant is told: an `event.retracted` event,
-- listed by GET /api/v1/events and delivered by webhook, naming the removed event and where
-- it was. Its id comes from the chain_events sequence, so the events list interleaves both
-- tables in the order the index learned of them.
CREATE TABLE event_retractions (
    id                 BIGINT PRIMARY KEY DEFAULT nextval('chain_events_id_seq'),
    public_id          TEXT NOT NULL UNIQUE,
    chain_id           BIGINT NOT NULL,
    contract           BYTEA NOT NULL,
    merchant_wallet    BYTEA NOT NULL,
    -- The removed event: its id, type, position and content as it was served.
    retracted_event_id TEXT NOT NULL,
    retracted_kind     TEXT NOT NULL,
    block_number       BIGINT NOT NULL,
    block_hash         BYTEA NOT NULL,
    block_time         TIMESTAMPTZ NOT NULL,
    transaction_hash   BYTEA NOT NULL,
    log_index          INTEGER NOT NULL,
    subscription_id    BIGINT,
    plan_id            BIGINT,
    decoded            JSONB NOT NULL,
    snapshot           JSONB,
    -- The block the index went back to (the common ancestor of both branches).
    ancestor_block     BIGINT NOT NULL,
    ancestor_hash      BYTEA NOT NULL,
    detected_at        TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX event_retractions_merchant ON event_retractions (merchant_wallet, id DESC);
CREATE INDEX event_retractions_subscription ON event_retractions (chain_id, subscription_id, id);

-- The outbox row of a retracted event stays (its attempts are the merchant's history) but no
-- longer counts as "the" row of that event id: if the event comes back on the new branch, it
-- gets a new row and is delivered again.
ALTER TABLE webhook_outbox ADD COLUMN retracted_at TIMESTAMPTZ;
DROP INDEX webhook_outbox_event;
CREATE UNIQUE INDEX webhook_outbox_event ON webhook_outbox (event_public_id)
    WHERE test_payload IS NULL AND retracted_at IS NULL;
