-- A merchant's revenue per calendar month (UTC), maintained with the ledger it sums: the
-- statement triggers below add every inserted charge, proration and refund and subtract
-- every deleted one, in the transaction that writes or undoes them (the sink's batch, a
-- reorg's undo), so `GET /api/v1/reports/revenue` and the dashboard read a few rows instead
-- of summing the ledger. `indexer verify` recomputes it from `ledger_entries`. A month
-- whose entries are all undone has no row, as in a fresh index.
CREATE TABLE revenue_months (
    chain_id        BIGINT NOT NULL,
    merchant_wallet BYTEA NOT NULL,
    month           DATE NOT NULL CHECK (extract(day FROM month) = 1),
    charges         NUMERIC(78, 0) NOT NULL,   -- sum of charges
    prorations      NUMERIC(78, 0) NOT NULL,   -- sum of upgrade prorations
    refunds         NUMERIC(78, 0) NOT NULL,   -- sum of refunds, positive
    entries         BIGINT NOT NULL,           -- ledger rows summed (0: the row is deleted)
    PRIMARY KEY (chain_id, merchant_wallet, month)
);

-- Adds the months of the inserted ledger rows, or subtracts those of the deleted ones (a
-- transition table, read with EXECUTE so one text serves both), per merchant and month.
CREATE FUNCTION revenue_months_follow_ledger() RETURNS trigger LANGUAGE plpgsql AS $$
DECLARE
    sign INTEGER := CASE TG_OP WHEN 'INSERT' THEN 1 ELSE -1 END;
    changed TEXT := CASE TG_OP WHEN 'INSERT' THEN 'inserted_rows' ELSE 'deleted_rows' END;
BEGIN
    EXECUTE format($q$
        INSERT INTO revenue_months AS r
            (chain_id, merchant_wallet, month, charges, prorations, refunds, entries)
        SELECT e.chain_id, ce.merchant_wallet,
               date_trunc('month', e.block_time AT TIME ZONE 'UTC')::date,
               %1$s * coalesce(sum(e.amount) FILTER (WHERE e.kind = 'charge'), 0),
               %1$s * coalesce(sum(e.amount) FILTER (WHERE e.kind = 'proration'), 0),
               %1$s * -coalesce(sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0),
               %1$s * count(*)
          FROM %2$I e JOIN chain_events ce ON ce.id = e.event_id
         WHERE e.kind IN ('charge', 'proration', 'refund')
         GROUP BY 1, 2, 3
        ON CONFLICT (chain_id, merchant_wallet, month) DO UPDATE SET
            charges = r.charges + EXCLUDED.charges,
            prorations = r.prorations + EXCLUDED.prorations,
            refunds = r.refunds + EXCLUDED.refunds,
            entries = r.entries + EXCLUDED.entries$q$, sign, changed);
    IF sign < 0 THEN
        DELETE FROM revenue_months WHERE entries = 0;
    END IF;
    RETURN NULL;
END $$;

CREATE TRIGGER ledger_entries_revenue_inserted AFTER INSERT ON ledger_entries
    REFERENCING NEW TABLE AS inserted_rows
    FOR EACH STATEMENT EXECUTE FUNCTION revenue_months_follow_ledger();
CREATE TRIGGER ledger_entries_revenue_deleted AFTER DELETE ON ledger_entries
    REFERENCING OLD TABLE AS deleted_rows
    FOR EACH STATEMENT EXECUTE FUNCTION revenue_months_follow_ledger();

-- The months of the ledger indexed so far.
INSERT INTO revenue_months (chain_id, merchant_wallet, month, charges, prorations, refunds, entries)
SELECT e.chain_id, ce.merchant_wallet,
       date_trunc('month', e.block_time AT TIME ZONE 'UTC')::date,
       coalesce(sum(e.amount) FILTER (WHERE e.kind = 'charge'), 0),
       coalesce(sum(e.amount) FILTER (WHERE e.kind = 'proration'), 0),
       -coalesce(sum(e.amount) FILTER (WHERE e.kind = 'refund'), 0),
       count(*)
  FROM ledger_entries e JOIN chain_events ce ON ce.id = e.event_id
 WHERE e.kind IN ('charge', 'proration', 'refund')
 GROUP BY 1, 2, 3;
