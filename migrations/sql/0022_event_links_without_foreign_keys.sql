-- The rows the sink derives from events name them by id — a plan by the event that created
-- it (and the one that deactivated it), a subscription by its first and latest events, a
-- ledger entry by its charge — and until now each of those links was a foreign key. Every
-- row the sink inserted or updated then ran the key's check: a lookup of the event that also
-- locks it (FOR KEY SHARE, a write to the event's row). A subscription's latest event
-- changes with every event, so that was one check per event; without the keys the sink runs
-- 18–24 % faster on the dense benchmark (issue 13). The sink is the only writer of these
-- tables and of chain_events, in one transaction per batch; a reorg's undo now deletes the
-- rows of the events it removes itself (store::index::delete_above) instead of by cascade,
-- and `indexer verify` reports any row that names an event the index does not hold.
--
-- Dropping a key locks both its table and chain_events (ACCESS EXCLUSIVE, until this
-- migration commits). Behind a long reader (a streaming ledger export, `indexer verify`) the
-- migration would wait and every new reader of those tables would queue behind it: it gives
-- up after 5 s instead (the binary exits; run it again when no export is streaming).
SET LOCAL lock_timeout = '5s';
-- First, the writer epoch moves on: an indexer still running the previous release (whose
-- undo relies on the cascades) is fenced at its next batch; its batch in flight, which holds
-- the cursor row, finishes before this migration goes on.
UPDATE indexer_cursor SET writer_epoch = writer_epoch + 1;
ALTER TABLE chain_plans DROP CONSTRAINT chain_plans_event_id_fkey;
ALTER TABLE chain_plans DROP CONSTRAINT chain_plans_deactivated_event_id_fkey;
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_created_event_id_fkey;
ALTER TABLE subscriptions DROP CONSTRAINT subscriptions_last_event_id_fkey;
ALTER TABLE ledger_entries DROP CONSTRAINT ledger_entries_event_id_fkey;
