-- `sequence` (DESIGN §4, issue 12): each event's 1-based position among its subscription's
-- events in chain order, served on every event and webhook. It was counted per row on every
-- events page (a correlated count over the subscription's events: 12–25 % of that statement
-- through pgbench on the bench data, issue 10); now the sink writes it once, as the last
-- stored event's sequence plus the event's place in its batch. A reorg deletes the events
-- above the common ancestor, so the last remaining event still holds the count of those
-- before it. NULL for events of no subscription (plan and operator events).
ALTER TABLE chain_events ADD COLUMN sequence BIGINT;
UPDATE chain_events ce SET sequence = x.n
  FROM (SELECT id, row_number() OVER (PARTITION BY chain_id, subscription_id ORDER BY id) AS n
          FROM chain_events WHERE subscription_id IS NOT NULL) x
 WHERE x.id = ce.id;
