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
-- number: no other dispatcher takes them before the lease runs out. (That dispatcher's
-- successes still land; its failures and hand-backs, fenced on the old status, do not: the
-- row is sent again once its lease has run out.)
UPDATE webhook_outbox SET status = 'pending' WHERE status = 'delivering';
ALTER TABLE webhook_outbox DROP CONSTRAINT webhook_outbox_status_check;
-- NOT VALID: no scan of the table under the exclusive lock; the UPDATE above, in this same
-- transaction, left no `delivering` row, and every write from now on is checked.
ALTER TABLE webhook_outbox ADD CONSTRAINT webhook_outbox_status_check
    CHECK (status IN ('pending', 'delivered', 'failed')) NOT VALID;
-- Room on each page for the claim's in-place update of rows written there (new pages only;
-- the default 100 leaves none, and a full page makes the update move the row after all).
ALTER TABLE webhook_outbox SET (fillfactor = 70);
