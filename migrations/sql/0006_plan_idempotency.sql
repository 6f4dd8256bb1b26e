-- A plan created with an Idempotency-Key remembers it, unique per merchant. The replay store
-- (idempotency_keys) forgets a request that ended in a 5xx so that the client may retry; the
-- plan row may already exist by then, and this key makes the retry resume that plan instead
-- of creating a second one.
ALTER TABLE plans ADD COLUMN idempotency_key TEXT;
CREATE UNIQUE INDEX plans_idempotency_key ON plans (merchant_id, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
