-- Per-API-key request budgets shared by every API process, so that a merchant's limit is the
-- same behind one replica or five. Each process keeps its in-process limiter (governor) as a
-- fast path and takes tokens from here a few at a time (`key_budget_take`).
--
-- The budget is a GCRA bucket: `tat_us` is the theoretical arrival time of the next token,
-- in microseconds since the epoch, never further ahead of now than the burst allows.
-- Unlogged: budgets are not worth a WAL write per take, and after a crash of Postgres they
-- start full again (at most one extra burst per key).
CREATE UNLOGGED TABLE key_budgets (
    key TEXT PRIMARY KEY,
    tat_us BIGINT NOT NULL
);

-- Takes up to `want` tokens of `key`'s budget (one token per `interval_us`, at most `burst`
-- at once) and answers how many it got and, when it got none, how long until one is free.
CREATE FUNCTION key_budget_take(key TEXT, want INT, interval_us BIGINT, burst INT,
                                OUT granted INT, OUT wait_us BIGINT)
LANGUAGE plpgsql AS $$
DECLARE
    now_us BIGINT := (extract(epoch FROM clock_timestamp()) * 1000000)::BIGINT;
    base BIGINT;
BEGIN
    INSERT INTO key_budgets AS b (key, tat_us) VALUES (key_budget_take.key, now_us)
    ON CONFLICT ON CONSTRAINT key_budgets_pkey DO NOTHING;
    SELECT greatest(b.tat_us, now_us) INTO base
    FROM key_budgets b WHERE b.key = key_budget_take.key FOR UPDATE;
    -- The k-th token is free when base + (k - 1) * interval <= now + (burst - 1) * interval.
    granted := least(want, greatest(0, burst - ((base - now_us) + interval_us - 1) / interval_us));
    IF granted > 0 THEN
        UPDATE key_budgets b SET tat_us = base + granted * interval_us
        WHERE b.key = key_budget_take.key;
        wait_us := 0;
    ELSE
        wait_us := base - now_us - (burst - 1) * interval_us;
    END IF;
END
$$;
