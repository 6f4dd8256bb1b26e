//! The relayer: the transactions the service sends for merchants with the operator key —
//! `createPlan(merchant, amount, planRef)` to provision plans, `cancel` /
//! `cancelAtPeriodEnd` for cancellations asked through the API — journaled before they are
//! broadcast, on one managed nonce, with bounded replacement and a per-merchant quota.
//!
//! Retry safety comes from the contract: `planRef` is unique per merchant on chain (a second
//! createPlan with the same merchant and ref reverts with `DuplicatePlanRef`), and every
//! attempt first asks `planIdByRef(merchant, ref)`, so one API plan can never become two
//! on-chain plans. Only the merchant and the operator can write a merchant's references, so
//! nobody else can occupy (front-run) one.
//!
//! [`plans`]: provisioning a plan on chain; [`cancel`]: a merchant's cancellation; [`redrive`]:
//! the re-driver that settles and re-sends journaled cancellations.

pub mod cancel;
pub mod plans;
pub mod redrive;

use alloy::primitives::{Address, B256, U256};
use alloy::providers::{DynProvider, Provider};
use alloy::signers::local::PrivateKeySigner;
use chainsub_abi::SubscriptionManager;
use chainsub_core::{CancelAt, OnchainPlanId, OnchainSubscriptionId};
use chainsub_sender::{Broadcast, Sender, bumped};
use chainsub_store::relayer::{SendKind, SignedSend};

use crate::config::Config;
use crate::http::codes::Code;
use crate::http::error::{ApiError, Result};

/// Sends provisioning transactions with the relayer key.
pub struct Relayer {
    /// The one chain sender (shared with the keeper): local signing, raw broadcast.
    sender: Sender,
    provider: DynProvider,
    manager: Address,
    /// The relayer's address (pays the gas).
    address: Address,
    /// Below this balance nothing is sent.
    min_balance: U256,
    /// The last balance check: `Some(true)` funded, `Some(false)` low, `None` unknown.
    funded: std::sync::Mutex<Option<bool>>,
    /// Test-only fail points (`--fail-point`, comma-separated names).
    fail_point: Option<String>,
    /// The spend bounds (RELAYER_SENDS_PER_MERCHANT_PER_DAY, RELAYER_MAX_REPLACEMENTS,
    /// RELAYER_REPLACE_AFTER_SECS, RELAYER_MAX_FEE_PER_GAS).
    limits: SendLimits,
    /// This process's sends take turns here before they ask for the relayer lock, so at
    /// most one of them waits on (or holds) the database lock at a time.
    turn: tokio::sync::Mutex<()>,
    /// The one connection the relayer lock is taken on: never the request pool's, so sends
    /// queued behind another process's never hold connections that requests need.
    lock_pool: crate::db::Pool,
}

/// What the relayer may spend.
#[derive(Debug, Clone, Copy)]
struct SendLimits {
    per_merchant_per_day: i64,
    max_replacements: i64,
    replace_after_secs: f64,
    max_fee_per_gas: u128,
}

/// What `createPlan` creates: the merchant's plan at `amount` under `plan_ref`.
#[derive(Debug, Clone, Copy)]
pub struct PlanTerms {
    pub merchant: Address,
    pub amount: U256,
    pub plan_ref: B256,
    /// Free days before the first charge: `createPlanWithTrial` when not 0.
    pub trial_days: u16,
}

/// Where a send is journaled before it is broadcast: the plan row it provisions, or the
/// cancellation request it carries out.
#[derive(Debug, Clone, Copy)]
pub enum Journal<'a> {
    Plan {
        scope: &'a chainsub_store::MerchantScope,
        row_id: i64,
    },
    Cancellation {
        scope: &'a chainsub_store::MerchantScope,
        row_id: i64,
    },
}

impl Journal<'_> {
    fn scope(&self) -> &chainsub_store::MerchantScope {
        match *self {
            Journal::Plan { scope, .. } | Journal::Cancellation { scope, .. } => scope,
        }
    }

    /// The send log's name for the journal's row.
    fn row(&self) -> (SendKind, i64) {
        match *self {
            Journal::Plan { row_id, .. } => (SendKind::CreatePlan, row_id),
            Journal::Cancellation { row_id, .. } => (SendKind::Cancel, row_id),
        }
    }

    /// Records `tx` (signed as `raw`, not yet broadcast) on the journal's row. `replacing`:
    /// the transaction the row must still name (`None`: a cancellation row still `sending`).
    /// `false` when a cancellation row is no longer as this send left it (another request
    /// took it over): nothing may be broadcast then.
    async fn record(
        &self,
        pool: &crate::db::Pool,
        tx: Sent,
        raw: &[u8],
        replacing: Option<B256>,
    ) -> Result<bool, String> {
        let conn = pool.get().await.map_err(|e| format!("journal: {e}"))?;
        let done = match *self {
            Journal::Plan { scope, row_id } => chainsub_store::plans::journal_send(
                &conn,
                scope,
                row_id,
                tx.hash.as_slice(),
                tx.nonce as i64,
                tx.max_fee_per_gas,
                tx.priority_fee_per_gas,
            )
            .await
            .map(|()| true),
            Journal::Cancellation { scope, row_id } => {
                chainsub_store::cancellations::journal_send(
                    &conn,
                    scope,
                    row_id,
                    &tx.journaled(raw),
                    replacing,
                )
                .await
            }
        };
        let done = done.map_err(|e| format!("journal: {e}"))?;
        if done {
            // The send log bounds the relayer's spend (quota, replacements).
            let (kind, row_id) = self.row();
            let send = SignedSend {
                kind,
                row_id,
                nonce: tx.nonce,
                tx_hash: tx.hash.as_slice(),
                max_fee_per_gas: tx.max_fee_per_gas,
            };
            chainsub_store::relayer::record(&conn, self.scope(), send)
                .await
                .map_err(|e| format!("send log: {e}"))?;
        }
        Ok(done)
    }
}

impl From<&chainsub_store::cancellations::JournaledTx> for Sent {
    fn from(tx: &chainsub_store::cancellations::JournaledTx) -> Self {
        Self {
            hash: tx.hash,
            nonce: tx.nonce,
            max_fee_per_gas: tx.max_fee_per_gas,
            priority_fee_per_gas: tx.priority_fee_per_gas,
        }
    }
}

impl Sent {
    /// This transaction as a cancellation row journals it.
    pub fn journaled(&self, raw: &[u8]) -> chainsub_store::cancellations::JournaledTx {
        chainsub_store::cancellations::JournaledTx {
            hash: self.hash,
            nonce: self.nonce,
            max_fee_per_gas: self.max_fee_per_gas,
            priority_fee_per_gas: self.priority_fee_per_gas,
            raw: raw.to_vec(),
        }
    }
}

/// Why the contract refuses a cancellation (from the estimate's revert), or why it must not
/// be sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// Cancelled or ended already (or unknown on chain).
    NotLive,
    /// Already set to cancel at period end.
    AlreadyCancelling,
    /// The operator may not act for this subscription's plan (the merchant created it
    /// itself).
    NotAuthorized,
    /// The relayer's key is not the contract's operator (an operator fault).
    NotOperator,
    /// On chain, the id is not the subscription the index shows (a reorg gave it to another
    /// merchant or subscriber): nothing is sent to the wrong place.
    Changed,
}

/// Why a cancellation was not (surely) sent.
#[derive(Debug, Clone)]
pub enum CancelError {
    /// The contract refuses it, or it must not be sent (nothing sent).
    Refused(Refusal),
    /// Nothing sent (before the journal); retrying may succeed.
    NotSent(String),
    /// Journaled as the second field, and the node refused it: it is not in the pool.
    NodeRefused(String, B256),
    /// Journaled, and the broadcast went unanswered: it may be in the pool. The journal
    /// keeps it, and the next request sends the same bytes again.
    MaybeSent(String),
    /// The request's pending transaction was not replaced (the relayer's spend bounds): it
    /// stands as journaled.
    Held(String),
}

/// Where a journaled transaction stands on chain.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxState {
    /// Mined and succeeded.
    Succeeded,
    /// Mined and reverted, or its nonce was taken by another transaction: it can never act.
    Dead,
    /// No receipt and its nonce unused: pending, or lost before the node saw it.
    Unmined,
}

/// A failed send: the estimate's error (a revert carries the contract's reason), nothing sent
/// for another reason, or — once journaled — refused by the node or unanswered.
enum SendFailure {
    Estimate(alloy::transports::TransportError),
    /// A replacement the spend bounds do not allow (too soon, too often, fee over the cap):
    /// nothing sent, the journaled transaction stands.
    Held(String),
    NotSent(String),
    /// Journaled as the second field, refused by the node.
    NodeRefused(String, B256),
    MaybeSent(String),
}

impl std::fmt::Display for SendFailure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Estimate(e) => write!(f, "estimate: {e}"),
            Self::NotSent(e) | Self::Held(e) | Self::NodeRefused(e, _) | Self::MaybeSent(e) => {
                f.write_str(e)
            }
        }
    }
}

impl SendFailure {
    /// What a merchant is told (a plan's `provisioning.error`): the kind of failure, and the
    /// contract's or the node's reason when there is one — never a transport or database
    /// detail (those are logged).
    fn for_merchant(&self, call: &str) -> String {
        use chainsub_abi::SubscriptionManager::SubscriptionManagerErrors as E;
        match self {
            Self::Estimate(e) => match e.as_error_resp() {
                Some(resp) => match resp.as_decoded_interface_error::<E>() {
                    Some(decoded) => {
                        let debug = format!("{decoded:?}");
                        let name = debug.split('(').next().unwrap_or("an error");
                        format!("{call} reverted: {name}")
                    }
                    None => format!("{call} was refused by the chain: {}", resp.message),
                },
                None => "the chain RPC could not be reached".into(),
            },
            Self::NotSent(_) => {
                "the transaction could not be prepared (chain RPC or database unavailable);                  nothing was sent"
                    .into()
            }
            Self::NodeRefused(why, _) => {
                format!("the node refused the transaction ({})", why.trim_start_matches("send: "))
            }
            Self::MaybeSent(_) => {
                "the node did not confirm the transaction; it may still be mined".into()
            }
            Self::Held(why) => format!("the pending transaction was not replaced: {why}"),
        }
    }
}

impl From<String> for SendFailure {
    fn from(e: String) -> Self {
        Self::NotSent(e)
    }
}

impl std::fmt::Debug for Relayer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Relayer")
            .field("manager", &self.manager)
            .finish_non_exhaustive()
    }
}

/// A provisioning transaction as sent: what replacing it at the same nonce needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sent {
    pub hash: B256,
    pub nonce: u64,
    pub max_fee_per_gas: u128,
    pub priority_fee_per_gas: u128,
}

/// Fee increase of a replacement over the transaction it replaces, in percent: the least
/// nodes accept (geth and reth want 10) with a margin. A replacement pays the node's current
/// suggestion when that is higher, so fees follow the market without compounding past it.
const REPLACEMENT_BUMP_PERCENT: u128 = 12;

/// Where a provisioning attempt ended.
#[derive(Debug, Clone)]
pub enum Outcome {
    /// Our transaction created the plan; everything comes from the receipt's PlanCreated log.
    Created {
        tx_hash: B256,
        onchain_id: OnchainPlanId,
        block_number: u64,
        block_hash: B256,
        log_index: u64,
    },
    /// The plan already exists on chain (an earlier attempt landed).
    AlreadyExists { onchain_id: OnchainPlanId },
    /// Sent, but no receipt within the bounded wait: still pending.
    Submitted { sent: Sent },
    /// Not created; safe to retry.
    Failed { error: String },
}

impl Relayer {
    /// The relayer of `cfg`, if a key is configured.
    pub fn from_config(cfg: &Config) -> Result<Option<Self>> {
        let Some(key) = &cfg.relayer_private_key else {
            return Ok(None);
        };
        let signer: PrivateKeySigner =
            key.expose().trim_start_matches("0x").parse().map_err(|_| {
                ApiError::Internal("RELAYER_PRIVATE_KEY is not a private key".into())
            })?;
        // The shared sender: nonce, gas and fees are decided here (see `send`), so a failed
        // estimate or send never leaves a cached nonce ahead of the chain.
        let sender = Sender::new(&cfg.rpc_url, cfg.chain_id, signer)
            .map_err(|e| ApiError::Internal(e.to_string()))?;
        let address = sender.address();
        let provider = sender.provider().clone();
        Ok(Some(Self {
            sender,
            provider,
            manager: cfg.contract_address,
            address,
            min_balance: U256::from(cfg.relayer_min_balance_wei),
            funded: std::sync::Mutex::new(None),
            fail_point: cfg.fail_point.clone(),
            limits: SendLimits {
                per_merchant_per_day: cfg.relayer_sends_per_merchant_per_day,
                max_replacements: cfg.relayer_max_replacements,
                replace_after_secs: cfg.relayer_replace_after_secs as f64,
                max_fee_per_gas: cfg.relayer_max_fee_per_gas,
            },
            turn: tokio::sync::Mutex::new(()),
            lock_pool: crate::db::pool(&cfg.database_url, 1)?,
        }))
    }

    /// Reads the relayer's balance (`api_relayer_balance_wei`) and refuses, with a 503 the
    /// merchant understands, when it is below RELAYER_MIN_BALANCE_WEI: a relayer that cannot
    /// pay would leave plans pending, and an attacker could drain it to there on purpose.
    /// An unreachable chain is not refused here: provisioning then fails visibly on its
    /// own (the plan is `failed` and can be retried), as it always did.
    pub async fn ensure_funded(&self) -> Result<()> {
        let balance = match self.sender.balance().await {
            Ok(b) => b,
            Err(e) => {
                tracing::warn!(error = %e, "relayer balance: chain unreachable");
                return Ok(());
            }
        };
        metrics::gauge!("api_relayer_balance_wei").set(f64::from(balance));
        let funded = balance >= self.min_balance;
        *self.funded.lock().unwrap_or_else(|p| p.into_inner()) = Some(funded);
        if funded {
            return Ok(());
        }
        tracing::error!(relayer = %self.address, %balance, min = %self.min_balance, "relayer balance below RELAYER_MIN_BALANCE_WEI: provisioning refused");
        Err(ApiError::Dependency {
            code: Code::RelayerUnderfunded,
            message: "the service's relayer cannot pay for transactions right now; the \
                      operator has been alerted — retry later"
                .into(),
        })
    }

    /// Whether the relayer may send for `scope` now: within the merchant's daily quota of
    /// relayer transactions (429 `relayer_quota_exceeded` with Retry-After), and funded
    /// ([`Relayer::ensure_funded`]). Checked before anything is written for a request.
    pub async fn ready_for(
        &self,
        pool: &crate::db::Pool,
        scope: &chainsub_store::MerchantScope,
    ) -> Result<()> {
        let conn = pool.get().await?;
        let (sends, frees_in) =
            chainsub_store::relayer::sends_in_window(&conn, scope, 86_400).await?;
        drop(conn);
        if sends >= self.limits.per_merchant_per_day {
            metrics::counter!("api_relayer_quota_refusals_total").increment(1);
            return Err(ApiError::Quota {
                code: Code::RelayerQuotaExceeded,
                message: format!(
                    "at most {} relayer transactions per merchant per 24 hours (plan creations, \
                     provisioning retries and cancellations, each replacement counted); retry \
                     after the time in Retry-After",
                    self.limits.per_merchant_per_day
                ),
                retry_after_secs: frees_in.ceil().max(1.0) as u64,
            });
        }
        self.ensure_funded().await
    }

    /// What the last balance check found: `ok`, `low_balance`, or `unknown` before any.
    pub fn funding_status(&self) -> &'static str {
        match *self.funded.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(true) => "ok",
            Some(false) => "low_balance",
            None => "unknown",
        }
    }

    /// Sends `createPlan` with a nonce this process does not cache: the estimate first (a
    /// reverting call consumes no nonce), then, in this process's queue of sends and under a
    /// database lock per relayer key (on the relayer's own connection) held until the node
    /// acknowledged the send, the key's pending nonce read from the node, the
    /// fees, and the signed transaction. Several API processes sharing the key take turns;
    /// any error leaves nothing behind, since the next send reads the nonce again. With
    /// `replace`, the transaction takes that one's nonce; while the node holds that one, this
    /// is a replacement: only when [`Relayer::may_replace`] allows it, with at least
    /// [`REPLACEMENT_BUMP_PERCENT`] more in fees, and never above `RELAYER_MAX_FEE_PER_GAS`.
    async fn send(
        &self,
        pool: &crate::db::Pool,
        request: alloy::rpc::types::TransactionRequest,
        replace: Option<&Sent>,
        journal: Journal<'_>,
    ) -> Result<Sent, SendFailure> {
        // A journaled transaction the node does not hold (never broadcast: the process died
        // first; or evicted) is sent again at its nonce at today's fees: nothing is replaced,
        // so neither the replacement rules nor the fee bump apply.
        let bump = match replace {
            Some(p) => match self.sender.node_holds(p.hash).await {
                Ok(false) => false,
                Ok(true) => {
                    self.may_replace(pool, journal, p).await?;
                    true
                }
                Err(e) => return Err(SendFailure::NotSent(format!("transaction: {e}"))),
            },
            None => false,
        };
        // Against the latest block (the sender's rule): the pending state may hold the very
        // transaction a replacement replaces, whose reference it would find taken.
        let gas = self
            .sender
            .estimate(request.clone())
            .await
            .map_err(SendFailure::Estimate)?;
        // One send of this process at a time asks for the lock, on the relayer's own
        // connection; the journal below takes one request-pool connection at a time.
        let _turn = self.turn.lock().await;
        let mut conn = self
            .lock_pool
            .get()
            .await
            .map_err(|e| format!("relayer lock: {e}"))?;
        let lock = conn
            .transaction()
            .await
            .map_err(|e| format!("relayer lock: {e}"))?;
        chainsub_store::pg::lock_relayer_sends(&lock, self.address.into_array())
            .await
            .map_err(|e| format!("relayer lock: {e}"))?;
        let (fee, tip) = self
            .sender
            .fees(None)
            .await
            .map_err(|e| format!("fees: {e}"))?;
        let cap = self.limits.max_fee_per_gas;
        let (max_fee, prio) = match replace {
            Some(p) if bump => {
                let max_fee = fee.max(bumped(p.max_fee_per_gas, REPLACEMENT_BUMP_PERCENT));
                if max_fee > cap {
                    return Err(SendFailure::Held(format!(
                        "a replacement would pay {max_fee} wei per gas, above \
                         RELAYER_MAX_FEE_PER_GAS ({cap})"
                    )));
                }
                (
                    max_fee,
                    tip.max(bumped(p.priority_fee_per_gas, REPLACEMENT_BUMP_PERCENT)),
                )
            }
            _ => (fee.min(cap), tip),
        };
        let prio = prio.min(max_fee);
        let mut nonce = match replace {
            Some(p) => p.nonce,
            None => self
                .sender
                .pending_nonce()
                .await
                .map_err(|e| format!("nonce: {e}"))?,
        };
        let gas_limit = gas.saturating_mul(6) / 5;
        // The transaction the journal's row names now (a replacement replaces that one).
        let mut journaled = replace.map(|p| p.hash);
        for retry in 0..2 {
            let signed = self
                .sender
                .sign(request.clone(), nonce, gas_limit, max_fee, prio)
                .await
                .map_err(|e| e.to_string())?;
            // Journaled (committed, outside the lock's transaction) before the node sees it:
            // a crash from here on leaves the row `submitted` with this transaction, and a
            // retry replaces it at this nonce rather than queueing a second one behind it.
            let this = Sent {
                hash: signed.hash,
                nonce,
                max_fee_per_gas: max_fee,
                priority_fee_per_gas: prio,
            };
            if !journal.record(pool, this, &signed.raw, journaled).await? {
                return Err(SendFailure::NotSent(
                    "journal: the request was taken over by another; nothing sent".into(),
                ));
            }
            journaled = Some(signed.hash);
            if self.fail_point("relayer-after-journal") {
                tracing::warn!("fail point relayer-after-journal reached: aborting");
                std::process::abort();
            }
            if self.fail_point("relayer-pause-after-journal") {
                tokio::time::sleep(std::time::Duration::from_secs(1)).await;
            }
            match self
                .sender
                .broadcast_journaled(&signed.raw)
                .await
                .map_err(|e| SendFailure::MaybeSent(format!("send: {e}")))?
            {
                Broadcast::Accepted => {
                    // Acknowledged: the next reader of the pending nonce sees this one. The
                    // transaction is sent whatever happens to the lock now (a failed commit
                    // only ends the lock's transaction, as a rollback would).
                    if let Err(e) = lock.commit().await {
                        tracing::warn!(error = %e, "relayer lock: commit after the send");
                    }
                    return Ok(Sent {
                        hash: signed.hash,
                        nonce,
                        max_fee_per_gas: max_fee,
                        priority_fee_per_gas: prio,
                    });
                }
                // The key's nonce moved (used from elsewhere): read it again, once. A
                // replacement whose nonce is gone has nothing left to replace.
                Broadcast::NonceTooLow if retry == 0 && replace.is_none() => {
                    nonce = self
                        .sender
                        .pending_nonce()
                        .await
                        .map_err(|e| format!("nonce: {e}"))?;
                }
                Broadcast::NonceTooLow => {
                    return Err(SendFailure::NodeRefused(
                        "send: nonce too low".into(),
                        signed.hash,
                    ));
                }
                Broadcast::Underpriced => {
                    return Err(SendFailure::NodeRefused(
                        "send: replacement underpriced".into(),
                        signed.hash,
                    ));
                }
                // A refusal we cannot classify may not mean "not in the pool": the row keeps
                // it, and its state on chain settles it later.
                Broadcast::Rejected(why) => {
                    return Err(SendFailure::MaybeSent(format!("send: {why}")));
                }
            }
        }
        Err(SendFailure::NotSent("send: nonce too low".into()))
    }

    /// Whether the journal's transaction `p` may be replaced now: not before it is
    /// RELAYER_REPLACE_AFTER_SECS old, and not more than RELAYER_MAX_REPLACEMENTS times.
    async fn may_replace(
        &self,
        pool: &crate::db::Pool,
        journal: Journal<'_>,
        p: &Sent,
    ) -> Result<(), SendFailure> {
        let (kind, row_id) = journal.row();
        let conn = pool
            .get()
            .await
            .map_err(|e| SendFailure::NotSent(format!("send log: {e}")))?;
        let (sends, age) = chainsub_store::relayer::sends_at_nonce(&conn, kind, row_id, p.nonce)
            .await
            .map_err(|e| SendFailure::NotSent(format!("send log: {e}")))?;
        let replaced = sends - 1;
        if replaced >= self.limits.max_replacements {
            metrics::counter!("api_relayer_replacements_held_total", "reason" => "max_replacements")
                .increment(1);
            return Err(SendFailure::Held(format!(
                "it was replaced {replaced} times already (RELAYER_MAX_REPLACEMENTS)"
            )));
        }
        if let Some(age) = age
            && age < self.limits.replace_after_secs
        {
            metrics::counter!("api_relayer_replacements_held_total", "reason" => "too_soon")
                .increment(1);
            return Err(SendFailure::Held(format!(
                "it was sent {age:.0} s ago and is replaced after {} s \
                 (RELAYER_REPLACE_AFTER_SECS)",
                self.limits.replace_after_secs
            )));
        }
        Ok(())
    }

    /// Sends `cancel(id)` (or `cancelAtPeriodEnd(id)`) for a merchant, journaled on its
    /// cancellation row before the broadcast, and returns once the node acknowledged it (the
    /// lifecycle event comes from the chain through the indexer). `expected`: the (merchant,
    /// subscriber, plan) the index shows for the id — checked on chain first, so a reorg that gave
    /// the id to someone else never gets it cancelled. `replace`: that request's earlier
    /// transaction, still unmined — replaced at its nonce with higher fees, never a second
    /// transaction beside it. The contract's refusals (the estimate reverts) come back as
    /// [`CancelError::Refused`].
    pub async fn cancel(
        &self,
        pool: &crate::db::Pool,
        onchain_id: OnchainSubscriptionId,
        expected: (Address, Address, OnchainPlanId),
        when: CancelAt,
        replace: Option<Sent>,
        journal: Journal<'_>,
    ) -> Result<Sent, CancelError> {
        let c = SubscriptionManager::new(self.manager, self.provider.clone());
        let id: U256 = onchain_id.into();
        let on_chain = c
            .getSubscription(id)
            .call()
            .await
            .map_err(|e| CancelError::NotSent(format!("getSubscription: {e}")))?;
        let plan = OnchainPlanId::try_from(on_chain.planId).ok();
        let (merchant, subscriber, expected_plan) = expected;
        if (on_chain.merchant, on_chain.subscriber, plan)
            != (merchant, subscriber, Some(expected_plan))
        {
            return Err(CancelError::Refused(Refusal::Changed));
        }
        let request = match when {
            CancelAt::PeriodEnd => c.cancelAtPeriodEnd(id).into_transaction_request(),
            CancelAt::Now => c.cancel(id).into_transaction_request(),
        };
        match self.send(pool, request, replace.as_ref(), journal).await {
            Ok(sent) => Ok(sent),
            Err(SendFailure::Estimate(e)) => match refusal(&e) {
                Some(Refusal::NotAuthorized) if !self.is_operator().await.unwrap_or(true) => {
                    Err(CancelError::Refused(Refusal::NotOperator))
                }
                Some(r) => Err(CancelError::Refused(r)),
                None => Err(CancelError::NotSent(format!("estimate: {e}"))),
            },
            Err(SendFailure::NotSent(e)) => Err(CancelError::NotSent(e)),
            Err(SendFailure::NodeRefused(e, hash)) => Err(CancelError::NodeRefused(e, hash)),
            Err(SendFailure::MaybeSent(e)) => Err(CancelError::MaybeSent(e)),
            Err(SendFailure::Held(why)) => Err(CancelError::Held(why)),
        }
    }

    /// Sends a journaled transaction's bytes again (the node may never have seen them): the
    /// node's "already known", and a used nonce this very transaction took (mined meanwhile,
    /// from another request's broadcast), are [`Broadcast::Accepted`].
    pub async fn rebroadcast(&self, raw: &[u8]) -> Result<Broadcast, String> {
        if self.fail_point("relayer-pause-before-rebroadcast") {
            tokio::time::sleep(std::time::Duration::from_secs(2)).await;
        }
        self.sender
            .broadcast_journaled(raw)
            .await
            .map_err(|e| format!("rebroadcast: {e}"))
    }

    /// Whether the test-only fail point `name` is set.
    fn fail_point(&self, name: &str) -> bool {
        self.fail_point
            .as_deref()
            .is_some_and(|set| set.split(',').any(|p| p.trim() == name))
    }

    /// Whether the relayer's key is the contract's operator now.
    async fn is_operator(&self) -> Result<bool, String> {
        let c = SubscriptionManager::new(self.manager, self.provider.clone());
        let operator = c
            .operator()
            .call()
            .await
            .map_err(|e| format!("operator: {e}"))?;
        Ok(operator == self.address)
    }

    /// Where the journaled cancellation transaction `tx` stands (see [`TxState`]). Before
    /// calling one dead, the chain is asked whether the cancellation it carried has taken
    /// effect anyway (mined between two reads, or an earlier transaction of the same request
    /// at that nonce was): then it counts as succeeded.
    pub async fn tx_state(
        &self,
        tx: &Sent,
        onchain_id: OnchainSubscriptionId,
        when: CancelAt,
    ) -> Result<TxState, String> {
        let receipt = |hash| async move {
            self.provider
                .get_transaction_receipt(hash)
                .await
                .map_err(|e| format!("receipt: {e}"))
        };
        if let Some(r) = receipt(tx.hash).await? {
            return Ok(if r.status() {
                TxState::Succeeded
            } else {
                TxState::Dead
            });
        }
        let mined = self
            .sender
            .mined_nonce()
            .await
            .map_err(|e| format!("nonce: {e}"))?;
        if mined <= tx.nonce {
            return Ok(TxState::Unmined);
        }
        // Its nonce is used: by this very transaction (mined after the first read) or by
        // another one.
        if let Some(r) = receipt(tx.hash).await?
            && r.status()
        {
            return Ok(TxState::Succeeded);
        }
        if self.cancelled_on_chain(onchain_id, when).await? {
            return Ok(TxState::Succeeded);
        }
        Ok(TxState::Dead)
    }

    /// Whether the chain shows the cancellation in effect: cancelled (or ended), or — for
    /// `when` is [`CancelAt::PeriodEnd`] — set to cancel at period end.
    async fn cancelled_on_chain(
        &self,
        onchain_id: OnchainSubscriptionId,
        when: CancelAt,
    ) -> Result<bool, String> {
        let c = SubscriptionManager::new(self.manager, self.provider.clone());
        let s = c
            .getSubscription(onchain_id.into())
            .call()
            .await
            .map_err(|e| format!("getSubscription: {e}"))?;
        let ended = chainsub_abi::subscription_status(s.status).is_some_and(|s| s.is_terminal());
        Ok(ended || (when == CancelAt::PeriodEnd && s.cancelAtPeriodEnd))
    }
}

/// The contract's reason in a reverted estimate of `cancel` / `cancelAtPeriodEnd`.
fn refusal(e: &alloy::transports::TransportError) -> Option<Refusal> {
    use chainsub_abi::SubscriptionManager::SubscriptionManagerErrors as E;
    let decoded = e.as_error_resp()?.as_decoded_interface_error::<E>()?;
    Some(match decoded {
        E::NotLive(_) | E::UnknownSubscription(_) => Refusal::NotLive,
        E::AlreadyCancelling(_) => Refusal::AlreadyCancelling,
        E::NotAuthorized(_) => Refusal::NotAuthorized,
        _ => return None,
    })
}
