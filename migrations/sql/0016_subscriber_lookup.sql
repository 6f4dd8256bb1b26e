-- The customer self-service page (issue 14, point 1) lists one wallet's subscriptions: an
-- index by subscriber, newest first, so that read touches only that wallet's rows.
CREATE INDEX subscriptions_subscriber ON subscriptions (subscriber, chain_id, onchain_id DESC);
