-- How many subscriptions entered and left each state per UTC day, so the summary report
-- can say how each count changed over the last 30 days. Every subscription event carries
-- the subscription as it was right after it (its snapshot): an event whose state differs
-- from the subscription's previous event's is a move, counted on the event's block day
-- (+1 to the state entered, -1 to the state left; a subscription's first event only
-- enters). The triggers below count the moves of the events a statement inserts, and
-- uncount those of the events it deletes (a reorg's undo), each against the subscription's
-- previous event in chain order (event ids are in chain order: the statement's own rows of a
-- subscription are its latest, so its earlier ones are found below the first of them), in the
-- same transaction: a fresh index counts the same. The states are the summary's: trialing, active, past_due
-- (those that renew), cancelling (live, ending at the period end), cancelled, ended.
-- `indexer verify` recomputes the table from the events.

CREATE FUNCTION subscription_state(status TEXT, cancelling BOOLEAN)
RETURNS TEXT LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN status IN ('trialing', 'active', 'past_due') AND cancelling THEN 'cancelling'
                ELSE status END
$$;

CREATE TABLE subscription_state_moves (
    chain_id        BIGINT NOT NULL,
    merchant_wallet BYTEA NOT NULL,
    day             DATE NOT NULL,
    state           TEXT NOT NULL,
    subscriptions   BIGINT NOT NULL,           -- entered minus left that day (0: deleted)
    PRIMARY KEY (chain_id, merchant_wallet, day, state)
);

-- The moves of the events of `changed` (a transition table, read with EXECUTE so one text
-- serves both triggers), counted with `sign`.
CREATE FUNCTION subscription_state_moves_follow_events() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed TEXT := CASE TG_OP WHEN 'INSERT' THEN 'new_rows' ELSE 'old_rows' END;
    sign INTEGER := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
    -- The days that came to zero (a move and its undoing in two statements of one day):
    -- deleted, as a fresh index would not have them.
    zero_chain BIGINT[];
    zero_merchant BYTEA[];
    zero_day DATE[];
    zero_state TEXT[];
BEGIN
    EXECUTE format($q$
        WITH ev AS (
            SELECT e.id, e.chain_id, e.subscription_id, e.merchant_wallet,
                   (e.block_time AT TIME ZONE 'UTC')::date AS day,
                   subscription_state(e.snap_status, e.snap_cancel_at_period_end) AS state,
                   lag(subscription_state(e.snap_status, e.snap_cancel_at_period_end))
                       OVER (PARTITION BY e.chain_id, e.subscription_id ORDER BY e.id) AS before,
                   row_number() OVER (PARTITION BY e.chain_id, e.subscription_id ORDER BY e.id) AS n
              FROM %1$I e
             WHERE e.snap_status IS NOT NULL AND e.subscription_id IS NOT NULL),
        moves AS (
            SELECT ev.chain_id, ev.merchant_wallet, ev.day, ev.state,
                   CASE WHEN ev.n > 1 THEN ev.before ELSE (
                       SELECT subscription_state(p.snap_status, p.snap_cancel_at_period_end)
                         FROM chain_events p
                        WHERE p.chain_id = ev.chain_id AND p.subscription_id = ev.subscription_id
                          AND p.id < ev.id AND p.snap_status IS NOT NULL
                        ORDER BY p.id DESC LIMIT 1) END AS before
              FROM ev),
        up AS (
            INSERT INTO subscription_state_moves AS t (chain_id, merchant_wallet, day, state, subscriptions)
            SELECT chain_id, merchant_wallet, day, state, %2$s * sum(n)
              FROM (SELECT chain_id, merchant_wallet, day, state, 1 AS n
                      FROM moves WHERE state IS DISTINCT FROM before
                    UNION ALL
                    SELECT chain_id, merchant_wallet, day, before, -1
                      FROM moves WHERE before IS NOT NULL AND state IS DISTINCT FROM before) m
             GROUP BY 1, 2, 3, 4
            HAVING sum(n) <> 0
            ON CONFLICT (chain_id, merchant_wallet, day, state) DO UPDATE SET
                subscriptions = t.subscriptions + EXCLUDED.subscriptions
            RETURNING t.chain_id, t.merchant_wallet, t.day, t.state, t.subscriptions)
        SELECT array_agg(chain_id), array_agg(merchant_wallet), array_agg(day), array_agg(state)
          FROM up WHERE subscriptions = 0$q$, changed, sign)
        INTO zero_chain, zero_merchant, zero_day, zero_state;
    IF zero_chain IS NOT NULL THEN
        DELETE FROM subscription_state_moves t
         USING unnest(zero_chain, zero_merchant, zero_day, zero_state) AS z(chain_id, merchant_wallet, day, state)
         WHERE t.chain_id = z.chain_id AND t.merchant_wallet = z.merchant_wallet
           AND t.day = z.day AND t.state = z.state AND t.subscriptions = 0;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER chain_events_state_moves_inserted AFTER INSERT ON chain_events
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION subscription_state_moves_follow_events();
CREATE TRIGGER chain_events_state_moves_deleted AFTER DELETE ON chain_events
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION subscription_state_moves_follow_events();

-- The events indexed so far.
INSERT INTO subscription_state_moves (chain_id, merchant_wallet, day, state, subscriptions)
WITH ev AS (
    SELECT e.chain_id, e.merchant_wallet, (e.block_time AT TIME ZONE 'UTC')::date AS day,
           subscription_state(e.snap_status, e.snap_cancel_at_period_end) AS state,
           lag(subscription_state(e.snap_status, e.snap_cancel_at_period_end))
               OVER (PARTITION BY e.chain_id, e.subscription_id ORDER BY e.id) AS before
      FROM chain_events e
     WHERE e.snap_status IS NOT NULL AND e.subscription_id IS NOT NULL)
SELECT chain_id, merchant_wallet, day, state, sum(n)
  FROM (SELECT chain_id, merchant_wallet, day, state, 1 AS n FROM ev
         WHERE state IS DISTINCT FROM before
        UNION ALL
        SELECT chain_id, merchant_wallet, day, before, -1 FROM ev
         WHERE before IS NOT NULL AND state IS DISTINCT FROM before) m
 GROUP BY 1, 2, 3, 4
HAVING sum(n) <> 0;
