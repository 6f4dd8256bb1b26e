-- Each subscription keeps the count of its events (`event_count`: its latest event's
-- `sequence`), so the sink numbers a batch's events from the subscription states it loads
-- anyway, instead of one index probe per inserted event for the subscription's last stored
-- sequence (12–19 % of the sink's time on the dense benchmark, issue 13). A reorg rebuilds the
-- subscriptions it touches by folding their remaining events, which counts them again.
--
-- First, the writer epoch moves on: an indexer still running the previous release (which does
-- not keep the count) is fenced at its next batch — its batch in flight, which holds the cursor
-- row, finishes before this migration goes on, and so is counted below.
UPDATE indexer_cursor SET writer_epoch = writer_epoch + 1;
ALTER TABLE subscriptions ADD COLUMN event_count BIGINT NOT NULL DEFAULT 0;
UPDATE subscriptions s SET event_count = x.n
  FROM (SELECT chain_id, subscription_id, count(*) AS n FROM chain_events
         WHERE subscription_id IS NOT NULL GROUP BY chain_id, subscription_id) x
 WHERE x.chain_id = s.chain_id AND x.subscription_id = s.onchain_id;
-- No default: a subscription row written by the previous release (which does not know the
-- count) fails instead of being numbered from zero.
ALTER TABLE subscriptions ALTER COLUMN event_count DROP DEFAULT;
