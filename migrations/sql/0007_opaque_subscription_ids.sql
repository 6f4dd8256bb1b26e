-- Subscription ids become opaque (issue 10): `sub_<32 hex>` instead of `sub_<on-chain
-- number>`, which told every merchant how many subscriptions the platform had. The id is
--   'sub_' || hex(sha256('chainsub.subscription' || int8(chain id) || creating tx hash
--                        || int8(on-chain id))[1..16])
-- exactly as `chainsub_core::SubscriptionId::of_creation` computes it (integers big-endian,
-- which is what int8send gives), so rows indexed before this migration get the id a fresh
-- re-index would give them. Snapshots carry the id too; both are rewritten here.
UPDATE subscriptions s
   SET public_id = 'sub_' || encode(substring(sha256(
           'chainsub.subscription'::bytea || int8send(s.chain_id)
           || ce.transaction_hash || int8send(s.onchain_id)) FROM 1 FOR 16), 'hex')
  FROM chain_events ce
 WHERE ce.id = s.created_event_id;

UPDATE chain_events ce
   SET snapshot = jsonb_set(ce.snapshot, '{id}', to_jsonb(s.public_id))
  FROM subscriptions s
 WHERE ce.snapshot IS NOT NULL
   AND s.chain_id = ce.chain_id
   AND s.onchain_id = ce.subscription_id;
