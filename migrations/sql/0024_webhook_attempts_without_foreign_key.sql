-- Recording a webhook attempt ran the foreign key's check for each attempts row: a lookup of
-- the outbox row through SPI that also locks it (FOR KEY SHARE), in the same statement that
-- then updates that row. That was ~20 % of the `record` statement's execution, and `record`
-- is the largest share of Postgres's time per delivery (issue 13). The dispatcher's `record`
-- (store::outbox::record) is the only writer of attempts and writes them only for outbox rows
-- that exist; the one place that deletes outbox rows (a reorg's undo, for rows never
-- attempted) deletes their attempts itself, as the cascade did.
--
-- webhook_outbox_due (next_attempt_at of the due rows) is dropped too: every claim and every
-- recorded attempt moves a row's next_attempt_at or status, so each one inserted an entry
-- into it, and nothing needs it — the dispatcher finds due rows through
-- webhook_outbox_merchant_due, whose predicate is the same, and so does the queue-depth gauge.
--
-- Dropping the key locks both tables (ACCESS EXCLUSIVE, until this migration commits);
-- behind a long reader it gives up after 5 s instead of queueing every request behind it.
SET LOCAL lock_timeout = '5s';
ALTER TABLE webhook_attempts DROP CONSTRAINT webhook_attempts_outbox_id_fkey;
DROP INDEX webhook_outbox_due;
