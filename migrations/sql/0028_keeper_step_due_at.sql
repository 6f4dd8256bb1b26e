-- A keeper step is one attempt on chain, known by when it fell due as well as by its period
-- and counted failures. A pull that fails for a token-side reason (TransferFailed: the token
-- paused, the recipient blocked, `false` returned) is recorded without counting an attempt,
-- so the subscription's period and failed attempts stay the same while its retry falls due a
-- day later. Under the old key (subscription, period, attempt) that retry was the step just
-- closed, and the subscription was never charged again.
ALTER TABLE keeper_steps ADD COLUMN due_at TIMESTAMPTZ;

-- Steps journaled before: a step whose outcome the index has not seen yet (still open, or
-- mined in a block past the index's cursor) and that matches its subscription's current step
-- takes that step's due time, as the keeper computes it. Every other step is history and
-- sorts before any due time — among them the steps of subscriptions a token-side failure
-- stranded, which the keeper then offers again.
UPDATE keeper_steps k
SET due_at = COALESCE(
    (SELECT CASE WHEN s.status = 'past_due' AND NOT s.cancel_at_period_end
                 THEN GREATEST(COALESCE(s.next_retry_at, s.current_period_end), s.current_period_end)
                 ELSE s.current_period_end END
     FROM subscriptions s
     WHERE s.chain_id = k.chain_id AND s.onchain_id = k.subscription_id
       AND s.status IN ('active', 'past_due')
       AND k.period = s.period + 1
       AND k.attempt = CASE WHEN s.cancel_at_period_end THEN 0 ELSE s.failed_attempts + 1 END
       AND (k.status IN ('pending', 'sent')
            OR (k.status = 'mined' AND k.block_number > COALESCE(
                    (SELECT c.block_number FROM indexer_cursor c WHERE c.chain_id = k.chain_id),
                    -1)))),
    '-infinity');

ALTER TABLE keeper_steps
    ALTER COLUMN due_at SET NOT NULL,
    DROP CONSTRAINT keeper_steps_chain_id_subscription_id_period_attempt_key,
    ADD CONSTRAINT keeper_steps_step_key UNIQUE (chain_id, subscription_id, period, attempt, due_at);
