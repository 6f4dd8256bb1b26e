-- A dispatcher's claim leases an outbox row without changing its status (issue 13): "being
-- delivered" is now a `pending` row whose lease (`locked_until`) has not run out, which is
-- what the claim and the dashboard's retry already tested. The claim then changes only
-- `attempts` and `locked_until`, which no index covers or filters on, so Postgres can update
-- the row in place on its page (a HOT update) instead of writing a new entry into each of the
-- outbox's five indexes — every delivery paid that once for the claim and once for its
-- outcome. Readers that show a delivery's state still say `delivering` for a leased row
-- (store::outbox::live_status!).
SET LOCAL lock_timeout = '5s';
-- Rows held by a dispatcher running the previous release keep their lease and attempt
-- number, so its outcome still lands (the fence is the attempt number and a live lease).
UPDATE webhook_outbox SET status = 'pending' WHERE status = 'delivering';
ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_status_check;
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_status_check
    CHECK (status IN ('pending', 'delivered', 'failed'));
-- Room on each page for the claim's in-place update of rows written there (new pages only;
-- the default 100 leaves none, and a full page makes the update move the row after all).
ALTER TABLE webhook_outbox SET (fillfactor = 70);
