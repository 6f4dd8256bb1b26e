-- API processes cache a key's lookup (one round trip per request instead of two) and drop
-- the merchant's entries when one of its keys changes: revoked, rotated, re-pointed or
-- deleted (with its merchant). NOTIFY is delivered at commit, so a process never hears of a
-- change it could not yet see. `last_used_at` writes do not signal (not in the column list).
-- Payload: the merchant's row id, or `*` for every key (TRUNCATE, which fires no row
-- trigger). An API process caches nothing unless both triggers are in place and enabled.
CREATE FUNCTION chainsub_api_key_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'TRUNCATE' THEN
        PERFORM pg_notify('chainsub_api_keys', '*');
    ELSE
        PERFORM pg_notify('chainsub_api_keys', OLD.merchant_id::text);
    END IF;
    RETURN NULL;
END;
$$;

CREATE TRIGGER api_key_notify
    AFTER UPDATE OF revoked_at, key_hash, merchant_id OR DELETE ON api_keys
    FOR EACH ROW EXECUTE FUNCTION chainsub_api_key_notify();

CREATE TRIGGER api_key_truncate_notify
    AFTER TRUNCATE ON api_keys
    FOR EACH STATEMENT EXECUTE FUNCTION chainsub_api_key_notify();
