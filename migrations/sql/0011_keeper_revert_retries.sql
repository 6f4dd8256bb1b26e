-- A charge that reverted on chain is no longer final (issue 11, point 10). v1 closed such a
-- step for good, and since the unique (subscription, period, attempt) key then matched
-- every later pass, that subscription was never charged again. Now a reverted step is taken
-- up again after `retry_at`, up to the keeper's KEEPER_MAX_REVERT_RETRIES; each retry gets a
-- new nonce and more gas. A step with that many reverts is abandoned (reported in metrics,
-- logs and /health), never silently.
ALTER TABLE keeper_steps
    ADD COLUMN reverts  INTEGER NOT NULL DEFAULT 0,  -- receipts with status 0 so far
    ADD COLUMN retry_at TIMESTAMPTZ;                 -- a reverted step may be sent again from
