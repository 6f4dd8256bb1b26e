-- A customer reference belongs to one wallet (issue 11, point 6).
--
-- v1 put the same customerRef (an HMAC of merchant and customer) into every subscription
-- of a customer, so anyone could copy it from a public SubscriptionCreated log, subscribe
-- from their own wallet, and the merchant saw the victim's customerExternalId on it. Now the
-- checkout's /tx endpoint derives the reference from the link's customer AND the connected
-- wallet, and records it here; the indexer resolves customerExternalId only when the
-- subscribing wallet is the one the reference was made for. A copied reference resolves to
-- nothing (the subscription says `customerReference: "unmatched"`).
--
-- checkouts.customer_ref (the v1, wallet-independent value) stays for the links made
-- before; nothing resolves by it any more.
CREATE TABLE checkout_wallet_refs (
    customer_ref         BYTEA PRIMARY KEY CHECK (length(customer_ref) = 32),
    merchant_id          BIGINT NOT NULL REFERENCES merchants(id) ON DELETE CASCADE,
    customer_external_id TEXT NOT NULL,
    wallet               BYTEA NOT NULL CHECK (length(wallet) = 20),
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);
