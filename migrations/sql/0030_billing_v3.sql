-- Contract v3 (issue 40): free trials, plan changes with proration, refunds.
--
-- * A subscription may be `trialing` (nothing charged yet; the first charge falls due at the
--   trial's end), carries its trial's end, and a downgrade scheduled for the next renewal (the
--   target plan and its amount; it takes effect at the current period's end).
-- * Each event's snapshot (chain events, retractions, renewal-at-risk observations) carries
--   the same three facts, NULL when there are none (`_snapshot_whole` is unchanged: they are
--   optional in a snapshot).
-- * Ledger entries gain the kinds `proration` (an upgrade's prorated charge) and `refund` (money
--   the merchant paid back; its amount is negative).
-- * A plan carries its trial length (`PlanTrial` on chain; the API's plan row asks for it),
--   0 for none.
-- * The keeper's due scan covers trialing subscriptions (their first charge).
-- * The keeper's observations of upcoming charges (`renewal_risks`) gain the reason
--   `trial_will_end`: a trial ends within KEEPER_TRIAL_WILL_END_LEAD_SECS (the
--   `subscription.trial_will_end` event). It observes no funds: `required` and `available`
--   are NULL for it, and only for it.
SET LOCAL lock_timeout = '5s';
-- The writer epoch moves on: an indexer of the previous release (which knows none of the new
-- events and writes none of the new columns) is fenced at its next batch.
UPDATE indexer_cursor SET writer_epoch = writer_epoch + 1;

ALTER TABLE subscriptions
    DROP CONSTRAINT subscriptions_status_check,
    ADD CONSTRAINT subscriptions_status_check
        CHECK (status IN ('active', 'past_due', 'cancelled', 'ended', 'trialing')),
    ADD COLUMN trial_end              TIMESTAMPTZ,
    ADD COLUMN pending_plan_onchain_id BIGINT,
    ADD COLUMN pending_amount         NUMERIC(78, 0),
    ADD CONSTRAINT subscriptions_pending_whole
        CHECK (num_nulls(pending_plan_onchain_id, pending_amount) IN (0, 2));

DROP INDEX subscriptions_due;
CREATE INDEX subscriptions_due ON subscriptions (current_period_end)
    WHERE status IN ('active', 'past_due', 'trialing');

DO $migration$
DECLARE
    t regclass;
BEGIN
    FOREACH t IN ARRAY '{chain_events,event_retractions,renewal_risks}'::regclass[] LOOP
        EXECUTE format($f$
            ALTER TABLE %1$s
                DROP CONSTRAINT %2$I,
                ADD CONSTRAINT %2$I CHECK (snap_status IN ('active', 'past_due', 'cancelled', 'ended', 'trialing')),
                ADD COLUMN snap_trial_end              TIMESTAMPTZ,
                ADD COLUMN snap_pending_plan_onchain_id BIGINT,
                ADD COLUMN snap_pending_amount         NUMERIC(78, 0),
                ADD CONSTRAINT %3$I CHECK (num_nulls(snap_pending_plan_onchain_id, snap_pending_amount) IN (0, 2))$f$,
            t, t::text || '_snap_status_check', t::text || '_snap_pending_whole');
    END LOOP;
END
$migration$;

ALTER TABLE ledger_entries
    DROP CONSTRAINT ledger_entries_kind_check,
    ADD CONSTRAINT ledger_entries_kind_check
        CHECK (kind IN ('charge', 'failed_charge', 'proration', 'refund')),
    ADD CONSTRAINT ledger_entries_refund_negative
        CHECK ((kind = 'refund') = (amount < 0));

ALTER TABLE renewal_risks
    DROP CONSTRAINT renewal_risks_reason_check,
    ADD CONSTRAINT renewal_risks_reason_check
        CHECK (reason IN ('allowance', 'balance', 'trial_will_end')),
    ALTER COLUMN required DROP NOT NULL,
    ALTER COLUMN available DROP NOT NULL,
    ADD CONSTRAINT renewal_risks_funds_observed
        CHECK ((reason = 'trial_will_end') = (required IS NULL AND available IS NULL));

ALTER TABLE chain_plans ADD COLUMN trial_days INTEGER NOT NULL DEFAULT 0 CHECK (trial_days BETWEEN 0 AND 90);
ALTER TABLE plans ADD COLUMN trial_days INTEGER NOT NULL DEFAULT 0 CHECK (trial_days BETWEEN 0 AND 90);
