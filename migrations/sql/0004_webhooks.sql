-- Webhook dispatcher support (owned by the api binary's dispatcher).

-- Wake dispatchers the moment outbox rows commit (NOTIFY is delivered at commit, so a
-- dispatcher never sees a row before it is visible). One notification per statement, not
-- per row: a block with many events wakes each dispatcher once. Polling stays as the
-- fallback for scheduled retries and missed notifications.
CREATE FUNCTION chainsub_webhook_outbox_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('chainsub_webhook_outbox', '');
    RETURN NULL;
END;
$$;

CREATE TRIGGER webhook_outbox_notify
    AFTER INSERT ON webhook_outbox
    FOR EACH STATEMENT EXECUTE FUNCTION chainsub_webhook_outbox_notify();

-- The per-merchant claim: due rows of one merchant, oldest first.
CREATE INDEX webhook_outbox_merchant_due ON webhook_outbox (merchant_wallet, next_attempt_at, id)
    WHERE status IN ('pending', 'delivering');

