-- `key_budget_take` also answers how many tokens the budget has left after the take, so that
-- an API process's `RateLimit` header counts what the other processes spent of the key's
-- budget, not only its own bucket. Callers that select `granted, wait_us` by name keep
-- working.
DROP FUNCTION key_budget_take(TEXT, INT, BIGINT, INT);

CREATE FUNCTION key_budget_take(key TEXT, want INT, interval_us BIGINT, burst INT,
                                OUT granted INT, OUT wait_us BIGINT, OUT remaining INT)
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
    -- Whole tokens free now once this take's are spent.
    remaining := greatest(0, burst - ((base + granted * interval_us - now_us) + interval_us - 1)
                                     / interval_us);
END
$$;
