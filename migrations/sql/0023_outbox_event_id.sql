-- The events page reads each event's webhook delivery state from the outbox, and until now
-- found it by the event's public id: one probe per listed event into a unique index on text
-- (72 MB on the bench's 1M rows). The outbox row now names its event by id as well (the id
-- of the chain event, retraction or renewal-at-risk observation: the three share one
-- sequence), and the unique index that keeps one live row per event is on that id (22 MB
-- there). The events page's SQL (key lookup and list) through one pgbench client on the
-- bench data, eight interleaved runs of each: median 756 → 901 tps (+19 %; every pair
-- faster) (issue 10); the sink writes a bigint key instead of a text one (issue 13).
--
-- Rows written by a release that does not set the id are refused (the CHECK below): a test
-- delivery has no event, and a retracted row's event is gone (retracted rows keep NULL; a
-- reorged event that came back has a new row and a new outbox row). A live row whose event
-- the index does not hold (`indexer verify` reports it) gets minus its own id: never an
-- event's id, unique, so the CHECK holds for every row and an update of such a row (a claim,
-- a retry) works as before; verify keeps reporting it.
SET LOCAL lock_timeout = '5s';
-- First, the writer epoch moves on: an indexer still running the previous release (which
-- inserts outbox rows without the id) is fenced at its next batch; its batch in flight,
-- which holds the cursor row, finishes before this migration goes on.
UPDATE indexer_cursor SET writer_epoch = writer_epoch + 1;
ALTER TABLE webhook_outbox ADD COLUMN event_id BIGINT;
UPDATE webhook_outbox o
SET event_id = COALESCE(
        (SELECT e.id FROM chain_events e WHERE e.public_id = o.event_public_id),
        (SELECT r.id FROM event_retractions r WHERE r.public_id = o.event_public_id),
        (SELECT k.id FROM renewal_risks k WHERE k.public_id = o.event_public_id),
        -o.id)
WHERE o.test_payload IS NULL AND o.retracted_at IS NULL;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_event_id_set
    CHECK (event_id IS NOT NULL OR test_payload IS NOT NULL OR retracted_at IS NOT NULL);
DROP INDEX webhook_outbox_event;
CREATE UNIQUE INDEX webhook_outbox_event ON webhook_outbox (event_id)
    WHERE test_payload IS NULL AND retracted_at IS NULL;
