-- Each event's subscription snapshot is written once (by the sink, or copied into a retraction
-- or a renewal-at-risk observation) and read as text on every events page and webhook body;
-- nothing queries inside it except `->>'id'`, which json has too. As jsonb, Postgres parsed it
-- into its binary tree on every insert and rendered it back to text on every read: with the
-- snapshot as json (the text as the sink wrote it, checked for validity on input), the events
-- page's SQL runs 11–17 % faster through pgbench on the bench data (issue 10), and the sink
-- no longer builds jsonb for every event it writes (issue 13). Rewrites the three tables once.
ALTER TABLE chain_events ALTER COLUMN snapshot TYPE json USING snapshot::json;
ALTER TABLE event_retractions ALTER COLUMN snapshot TYPE json USING snapshot::json;
ALTER TABLE renewal_risks ALTER COLUMN snapshot TYPE json USING snapshot::json;
