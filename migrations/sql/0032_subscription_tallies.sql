-- A merchant's subscriptions counted by what the summary report asks of them, maintained
-- with the rows they count: the statement triggers below add every inserted subscription,
-- subtract every deleted one and move every updated one between its old and new bucket, in
-- the transaction that writes them (the sink's batch, a reorg's undo and rebuild), so
-- `GET /api/v1/reports/summary` and the dashboard read a few hundred rows instead of every
-- subscription. `indexer verify` recomputes both tables from `subscriptions`.
--
-- Times are kept to the UTC day: "due in the next 7 days" counts the charges due on or
-- before the 7th day from today, "in the last 30 days" the days from the 30th day before
-- today on.

-- The UTC day of a live subscription's next charge: a past-due one's next retry (none when
-- no retry is left), else its period end (a trial's end). NULL for a cancelled or ended one.
CREATE FUNCTION subscription_due_day(status TEXT, next_retry_at TIMESTAMPTZ,
                                     current_period_end TIMESTAMPTZ)
RETURNS DATE LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN status = 'past_due' THEN (next_retry_at AT TIME ZONE 'UTC')::date
                WHEN status IN ('trialing', 'active') THEN (current_period_end AT TIME ZONE 'UTC')::date
           END
$$;

-- The UTC day a cancelled or ended subscription stopped (its last event's block time); NULL
-- for a live one.
CREATE FUNCTION subscription_stopped_day(status TEXT, updated_at TIMESTAMPTZ)
RETURNS DATE LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN status IN ('cancelled', 'ended') THEN (updated_at AT TIME ZONE 'UTC')::date END
$$;

CREATE TABLE subscription_tallies (
    chain_id        BIGINT NOT NULL,
    merchant_wallet BYTEA NOT NULL,
    status          TEXT NOT NULL,
    cancelling      BOOLEAN NOT NULL,          -- cancel_at_period_end
    due_day         DATE,                      -- subscription_due_day(...)
    stopped_day     DATE,                      -- subscription_stopped_day(...)
    subscriptions   BIGINT NOT NULL,           -- rows counted (0: the row is deleted)
    amount          NUMERIC(78, 0) NOT NULL,   -- sum of amount
    due_amount      NUMERIC(78, 0) NOT NULL,   -- sum of coalesce(pending_amount, amount)
    CONSTRAINT subscription_tallies_key UNIQUE NULLS NOT DISTINCT
        (chain_id, merchant_wallet, status, cancelling, due_day, stopped_day)
);

-- Subscriptions created per UTC day (their creation's block time).
CREATE TABLE subscription_starts (
    chain_id        BIGINT NOT NULL,
    merchant_wallet BYTEA NOT NULL,
    day             DATE NOT NULL,
    subscriptions   BIGINT NOT NULL,           -- 0: the row is deleted
    PRIMARY KEY (chain_id, merchant_wallet, day)
);

-- Adds the inserted rows (`new_rows`), subtracts the deleted ones (`old_rows`), and for an
-- update both: a row that stays in its bucket adds nothing but a changed amount. Read with
-- EXECUTE so one text serves the three triggers, each with its own transition tables.
CREATE FUNCTION subscription_tallies_follow() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    changed TEXT := CASE TG_OP
        WHEN 'INSERT' THEN 'SELECT 1 AS n, * FROM new_rows'
        WHEN 'DELETE' THEN 'SELECT -1 AS n, * FROM old_rows'
        ELSE 'SELECT 1 AS n, * FROM new_rows UNION ALL SELECT -1 AS n, * FROM old_rows'
    END;
BEGIN
    EXECUTE format($q$
        INSERT INTO subscription_tallies AS t (chain_id, merchant_wallet, status, cancelling,
            due_day, stopped_day, subscriptions, amount, due_amount)
        SELECT c.chain_id, c.merchant_wallet, c.status, c.cancel_at_period_end,
               subscription_due_day(c.status, c.next_retry_at, c.current_period_end),
               subscription_stopped_day(c.status, c.updated_at),
               sum(c.n), sum(c.n * c.amount), sum(c.n * coalesce(c.pending_amount, c.amount))
          FROM (%s) c
         GROUP BY 1, 2, 3, 4, 5, 6
        HAVING sum(c.n) <> 0 OR sum(c.n * c.amount) <> 0
            OR sum(c.n * coalesce(c.pending_amount, c.amount)) <> 0
        ON CONFLICT ON CONSTRAINT subscription_tallies_key DO UPDATE SET
            subscriptions = t.subscriptions + EXCLUDED.subscriptions,
            amount = t.amount + EXCLUDED.amount,
            due_amount = t.due_amount + EXCLUDED.due_amount$q$, changed);
    -- An update never changes created_at.
    IF TG_OP <> 'UPDATE' THEN
        EXECUTE format($q$
            INSERT INTO subscription_starts AS t (chain_id, merchant_wallet, day, subscriptions)
            SELECT c.chain_id, c.merchant_wallet, (c.created_at AT TIME ZONE 'UTC')::date, sum(c.n)
              FROM (%s) c
             GROUP BY 1, 2, 3
            ON CONFLICT (chain_id, merchant_wallet, day) DO UPDATE SET
                subscriptions = t.subscriptions + EXCLUDED.subscriptions$q$, changed);
    END IF;
    IF TG_OP <> 'INSERT' THEN
        -- Buckets emptied: only the merchants whose rows left one.
        DELETE FROM subscription_tallies t
         WHERE t.subscriptions = 0
           AND (t.chain_id, t.merchant_wallet) IN (SELECT chain_id, merchant_wallet FROM old_rows);
        DELETE FROM subscription_starts t
         WHERE t.subscriptions = 0
           AND (t.chain_id, t.merchant_wallet) IN (SELECT chain_id, merchant_wallet FROM old_rows);
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER subscriptions_tallies_inserted AFTER INSERT ON subscriptions
    REFERENCING NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION subscription_tallies_follow();
CREATE TRIGGER subscriptions_tallies_updated AFTER UPDATE ON subscriptions
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION subscription_tallies_follow();
CREATE TRIGGER subscriptions_tallies_deleted AFTER DELETE ON subscriptions
    REFERENCING OLD TABLE AS old_rows
    FOR EACH STATEMENT EXECUTE FUNCTION subscription_tallies_follow();

-- The subscriptions indexed so far.
INSERT INTO subscription_tallies (chain_id, merchant_wallet, status, cancelling, due_day,
    stopped_day, subscriptions, amount, due_amount)
SELECT chain_id, merchant_wallet, status, cancel_at_period_end,
       subscription_due_day(status, next_retry_at, current_period_end),
       subscription_stopped_day(status, updated_at),
       count(*), sum(amount), sum(coalesce(pending_amount, amount))
  FROM subscriptions
 GROUP BY 1, 2, 3, 4, 5, 6;
INSERT INTO subscription_starts (chain_id, merchant_wallet, day, subscriptions)
SELECT chain_id, merchant_wallet, (created_at AT TIME ZONE 'UTC')::date, count(*)
  FROM subscriptions
 GROUP BY 1, 2, 3;

-- The summary's renewals at risk start from the merchant's notices.
CREATE INDEX renewal_risks_merchant_chain ON renewal_risks (merchant_wallet, chain_id, subscription_id, period)
    WHERE reason IN ('allowance', 'balance');
