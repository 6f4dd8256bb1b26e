// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// Minimal ERC-20 surface the manager needs.
interface IERC20 {
    function transferFrom(address from, address to, uint256 amount) external returns (bool);
    function balanceOf(address account) external view returns (uint256);
    function allowance(address owner, address spender) external view returns (uint256);
}

/// EIP-2612 (USDC has it): an allowance from a signed message.
interface IERC20Permit {
    function permit(address owner, address spender, uint256 value, uint256 deadline, uint8 v, bytes32 r, bytes32 s)
        external;
}

/// @title SubscriptionManager (v3)
/// @notice Recurring USDC subscriptions paid from the subscriber's own allowance.
///
/// v2 (issue 11): `subscribe` carries the terms the customer was shown (merchant and amount
/// per period) and reverts when the plan differs; plan references are scoped per merchant,
/// so nobody can take another merchant's reference; a failed pull that is not the
/// subscriber's fault does not count toward the grace attempts; plans can be deactivated;
/// the operator is handed over in two steps. `chargeMany` (issue 13) renews many
/// subscriptions in one transaction, each exactly as `charge` would. The operator may cancel
/// (at once or at period end) the subscriptions of plans it created for a merchant, on the
/// merchant's behalf (issue 14: a merchant cancels through the API); plans a merchant created
/// itself stay out of the operator's reach, for cancellation and for deactivation alike.
///
/// v2.1 (issue 46): every call that changes a subscription is `nonReentrant` and writes its
/// state before the token call, so a token calling back can neither cancel nor resurrect what
/// is being charged; a `transferFrom` answer that is not a well-formed boolean is a failed
/// pull (TransferFailed), never a revert of the whole `chargeMany`; missed periods are not
/// collected afterwards (catch-up rule below); a subscription stays past due at most until
/// the period it owes is over (past-due rule below).
///
/// v3 (issue 40): free trials, plan changes with proration, and refunds (rules below).
///
/// Lifecycle (DESIGN §3):
///   subscribe            -> Active (first period charged at once)
///   subscribe, trial plan, first trial of this wallet on this plan -> Trialing (no charge)
///   charge on Trialing once the trial is over, pulled -> Active (period 1)
///   charge on Trialing once the trial is over, pull failed -> PastDue (owes period 1)
///   charge, pulled       -> Active (next period)
///   charge, pull failed  -> PastDue
///   charge on PastDue, pulled           -> Active
///   MAX_PAYMENT_ATTEMPTS failures       -> Ended (reason PaymentFailed)
///   charge on PastDue once the owed period is over -> Ended (reason PaymentFailed)
///   cancelAtPeriodEnd, then charge once the period is over -> Ended (reason CancelAtPeriodEnd)
///   cancel               -> Cancelled
/// Cancelled and Ended are terminal.
///
/// Grace rules: a due period gets at most MAX_PAYMENT_ATTEMPTS (3) counted failures. The first
/// attempt may happen as soon as the period is due; each retry waits at least RETRY_INTERVAL
/// (1 day) after the previous failure. The third counted failure ends the subscription, so a
/// customer who never pays is ended about two days after the period fell due. A successful
/// retry charges the same period (periods stay anchored on the start day) and returns the
/// subscription to Active.
///
/// Only the subscriber's own shortfalls count: InsufficientAllowance and InsufficientBalance.
/// A pull that fails while allowance and balance both suffice (TransferFailed: the token is
/// paused, the merchant is blocked by the token, the token returned false) makes the
/// subscription PastDue and waits RETRY_INTERVAL like any failure, but never counts toward
/// the attempts, so nobody can end subscriptions by calling `charge` while the token is
/// down. PaymentFailed.attempt is the number of counted failures of the period after the
/// event (unchanged by a TransferFailed).
///
/// Catch-up rule: a charge collects one period, never more. When a renewal is charged after
/// the period it would pay for is already over (nobody called `charge` for a whole period,
/// e.g. during a keeper outage), the periods that ended unbilled are skipped: the period
/// charged is the one that contains the block's time, still anchored on the start day, so
/// its number jumps. A subscriber is never charged twice in a row for time gone by, and an id
/// listed many times in one `chargeMany` is charged at most once.
///
/// Past-due rule: a subscription that is past due when the period it owes is over is ended
/// (SubscriptionEnded, reason PaymentFailed) by the next `charge`, without a pull. Failures
/// the subscriber causes end it sooner (three counted failures, about two days); failures on
/// the token's side (never counted) end it there, at the latest one period after it fell due.
///
/// Trial rule: a plan may carry `trialDays` (1..MAX_TRIAL_DAYS). A wallet's first subscription
/// to such a plan starts a trial: no money moves (the allowance must already cover one period,
/// so the first charge needs no further signature), `periodEnd` is the trial's end and the
/// anchor of the monthly periods that follow, `period` is 0; SubscriptionCreated carries the
/// trial as its period and a non-zero `trialEnd` (0 without a trial). The keeper's `charge`
/// at the trial's end collects period 1. A cancellation during the trial (at once or at its end)
/// means no charge ever. One trial per wallet per plan, for ever: a later subscription of the
/// same wallet to the same plan is charged at once, as on a plan without a trial.
///
/// Plan-change rule: the subscriber moves an Active subscription to another active plan of
/// the same merchant, the call carrying the terms they were shown (plan, merchant, amount).
/// Upgrade (a higher amount): effective at once; the difference for the rest of the current
/// period is charged now, prorated by the seconds left:
///   proration = (newAmount - oldAmount) * (periodEnd - now) / (periodEnd - periodStart),
/// rounded down (never in the subscriber's disfavour); the next renewals charge the new
/// amount. A downgrade (an equal or lower amount) is scheduled: it takes effect at the next
/// renewal (the first charge attempt of the next period, whatever its outcome: that attempt
/// and its retries charge the new amount) and moves no money now. Scheduling again replaces
/// it; `cancelPlanChange` undoes it; a cancellation (at once or at period end) drops it; if
/// the wallet has meanwhile subscribed to the target plan, the change is dropped at renewal
/// (PlanChangeCancelled). The subscription keeps its id.
///
/// Refund rule: the merchant's wallet (the payee, nobody else) refunds all or part of the
/// subscription's latest charged period (its charge plus any proration in it) to the
/// subscriber, from its own balance and allowance to this contract (approve, or the permit
/// of `refundWithPermit`). The refunds of a period never exceed what was paid for it. The
/// call names the period it refunds and reverts when that is no longer the latest (a renewal
/// came first), so a refund is never applied to a period the merchant did not mean. An
/// optional flag also cancels a live subscription at once. Earlier periods are refunded off
/// the contract: keeping every period's charge on chain would cost a renewal ~20,000 gas.
///
/// Billing periods are calendar months anchored on the start time, with the day clamped to
/// the month's end (Jan 31 -> Feb 28/29 -> Mar 31), as Stripe does: period k ends at
/// addMonths(anchor, k).
contract SubscriptionManager {
    enum Status {
        None,
        Active,
        PastDue,
        Cancelled,
        Ended,
        Trialing
    }

    /// Why a payment attempt failed.
    enum FailureReason {
        None,
        InsufficientAllowance,
        InsufficientBalance,
        TransferFailed
    }

    /// Why a subscription ended.
    enum EndReason {
        None,
        PaymentFailed,
        CancelAtPeriodEnd
    }

    struct Plan {
        address merchant;
        /// False once deactivated: no new subscriptions; existing ones continue. (Next to
        /// `merchant`, in the same storage slot: `subscribe` reads both with one SLOAD.)
        bool active;
        /// Free days before the first charge (0: none). Same slot as `merchant`.
        uint16 trialDays;
        uint256 amount;
        bytes32 planRef;
    }

    struct Subscription {
        uint256 planId;
        address subscriber;
        /// Paid for the current period: its charge plus any proration (refund limit).
        uint96 paid;
        address merchant;
        /// Refunded of `paid`.
        uint96 refunded;
        uint256 amount;
        bytes32 customerRef;
        uint64 anchor;
        uint64 periodStart;
        uint64 periodEnd;
        uint32 period;
        uint8 failedAttempts;
        uint64 lastFailureAt;
        Status status;
        bool cancelAtPeriodEnd;
        /// A scheduled downgrade's plan (0: none), applied at the next renewal.
        uint64 pendingPlanId;
    }

    uint8 public constant MAX_PAYMENT_ATTEMPTS = 3;
    uint64 public constant RETRY_INTERVAL = 1 days;
    uint16 public constant MAX_TRIAL_DAYS = 90;

    IERC20 public immutable token;
    address public operator;
    /// The operator-to-be of a started hand-over (zero when none).
    address public pendingOperator;

    uint256 public planCount;
    uint256 public subscriptionCount;

    mapping(uint256 => Plan) private _plans;
    /// merchant => planRef => plan id (0 when none). References are scoped per merchant: a
    /// plan for one merchant can never take another merchant's reference.
    mapping(address => mapping(bytes32 => uint256)) public planIdByRef;
    mapping(uint256 => Subscription) private _subscriptions;
    /// planId => subscriber => live subscription id (0 when none).
    mapping(uint256 => mapping(address => uint256)) public liveSubscriptionOf;
    /// Plans the operator created on a merchant's behalf: the operator may cancel their
    /// subscriptions for the merchant. A plan the merchant created itself is never marked.
    mapping(uint256 => bool) public createdByOperator;
    /// planId => wallet => true once the wallet has had the plan's trial.
    mapping(uint256 => mapping(address => bool)) public trialUsed;

    uint256 private _lock = 1;

    event OperatorChanged(address indexed previousOperator, address indexed newOperator);
    event OperatorTransferStarted(address indexed currentOperator, address indexed pendingOperator);

    event PlanCreated(
        uint256 indexed planId, address indexed merchant, bytes32 indexed planRef, uint256 amount, address createdBy
    );

    event PlanDeactivated(uint256 indexed planId, address indexed merchant, address by);

    /// Right after PlanCreated, for a plan with a trial.
    event PlanTrial(uint256 indexed planId, address indexed merchant, uint16 trialDays);

    /// The subscription moved to `planId` (from `previousPlanId`) at `amount` per period:
    /// an upgrade, with `proration` charged for the rest of `period`, or a scheduled change
    /// applied at the start of `period` (proration 0).
    event PlanChanged(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        uint256 previousPlanId,
        uint256 amount,
        uint256 proration,
        uint32 period
    );

    /// A downgrade to `newPlanId` at `newAmount`, effective at `effectiveAt` (the period end).
    event PlanChangeScheduled(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        uint256 newPlanId,
        uint256 newAmount,
        uint64 effectiveAt
    );

    /// A scheduled change to `newPlanId` was undone (or dropped at renewal).
    event PlanChangeCancelled(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        uint256 newPlanId
    );

    /// The merchant refunded `amount` of `period`; `totalRefunded` of that period so far.
    event SubscriptionRefunded(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        uint32 period,
        uint256 amount,
        uint256 totalRefunded
    );

    event SubscriptionCreated(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        bytes32 customerRef,
        uint256 amount,
        uint64 periodStart,
        uint64 periodEnd,
        uint64 trialEnd
    );

    event SubscriptionCharged(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        uint256 amount,
        uint32 period,
        uint64 periodStart,
        uint64 periodEnd,
        uint8 attempt
    );

    event PaymentFailed(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        uint256 amount,
        uint32 period,
        uint8 attempt,
        FailureReason reason,
        uint64 nextRetryAt
    );

    event CancelAtPeriodEndSet(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        address by,
        uint64 periodEnd
    );

    event SubscriptionCancelled(
        uint256 indexed subscriptionId, address indexed merchant, address indexed subscriber, uint256 planId, address by
    );

    event SubscriptionEnded(
        uint256 indexed subscriptionId,
        address indexed merchant,
        address indexed subscriber,
        uint256 planId,
        EndReason reason
    );

    error NotAuthorized();
    error InvalidOperator();
    error PlanInactive(uint256 planId);
    error TermsMismatch(uint256 planId, address merchant, uint256 amount);
    error InvalidAmount();
    error InvalidReference();
    error DuplicatePlanRef(uint256 existingPlanId);
    error UnknownPlan(uint256 planId);
    error UnknownSubscription(uint256 subscriptionId);
    error AlreadySubscribed(uint256 subscriptionId);
    error NotLive(uint256 subscriptionId);
    error NotDue(uint64 dueAt);
    error AlreadyCancelling(uint256 subscriptionId);
    error FirstPaymentFailed(FailureReason reason);
    error Reentrancy();
    error InvalidTrial(uint16 maxTrialDays);
    error NotActive(uint256 subscriptionId);
    error SamePlan(uint256 planId);
    error NoPlanChange(uint256 subscriptionId);
    error ProrationFailed(FailureReason reason);
    error NotRefundable(uint32 latestPeriod);
    error RefundTooLarge(uint256 refundable);
    error RefundFailed(FailureReason reason);

    modifier nonReentrant() {
        if (_lock != 1) revert Reentrancy();
        _lock = 2;
        _;
        _lock = 1;
    }

    constructor(IERC20 token_, address operator_) {
        token = token_;
        operator = operator_;
        emit OperatorChanged(address(0), operator_);
    }

    /// Starts handing the operator role to `newOperator`, who must accept it. Calling it
    /// again replaces the pending operator. The zero address is refused.
    function transferOperator(address newOperator) external {
        if (msg.sender != operator) revert NotAuthorized();
        if (newOperator == address(0)) revert InvalidOperator();
        pendingOperator = newOperator;
        emit OperatorTransferStarted(operator, newOperator);
    }

    /// Completes a hand-over: only the pending operator can call it.
    function acceptOperator() external {
        if (msg.sender != pendingOperator || msg.sender == address(0)) revert NotAuthorized();
        emit OperatorChanged(operator, msg.sender);
        operator = msg.sender;
        pendingOperator = address(0);
    }

    // ---------------------------------------------------------------- plans

    /// Creates a monthly plan for `merchant`. Callable by the operator (relayer) on the
    /// merchant's behalf, or by the merchant itself. `planRef` ties the plan to the API's plan
    /// row and is unique per merchant, so a retried provisioning can never create a second
    /// plan, and nobody but the merchant or the operator can occupy a merchant's reference.
    /// `amount` is at most 2^96 - 1 base units.
    function createPlan(address merchant, uint256 amount, bytes32 planRef) external returns (uint256 planId) {
        return _createPlan(merchant, amount, planRef, 0);
    }

    /// `createPlan` for a plan whose subscriptions start with `trialDays` free days
    /// (1..MAX_TRIAL_DAYS; trial rule above). Emits PlanTrial after PlanCreated.
    function createPlanWithTrial(address merchant, uint256 amount, bytes32 planRef, uint16 trialDays)
        external
        returns (uint256 planId)
    {
        if (trialDays == 0 || trialDays > MAX_TRIAL_DAYS) revert InvalidTrial(MAX_TRIAL_DAYS);
        return _createPlan(merchant, amount, planRef, trialDays);
    }

    function _createPlan(address merchant, uint256 amount, bytes32 planRef, uint16 trialDays)
        private
        returns (uint256 planId)
    {
        if (msg.sender != operator && msg.sender != merchant) revert NotAuthorized();
        if (merchant == address(0)) revert NotAuthorized();
        if (amount == 0 || amount > type(uint96).max) revert InvalidAmount();
        if (planRef == bytes32(0)) revert InvalidReference();
        uint256 existing = planIdByRef[merchant][planRef];
        if (existing != 0) revert DuplicatePlanRef(existing);

        planId = ++planCount;
        _plans[planId] =
            Plan({merchant: merchant, active: true, trialDays: trialDays, amount: amount, planRef: planRef});
        planIdByRef[merchant][planRef] = planId;
        if (msg.sender == operator) createdByOperator[planId] = true;
        emit PlanCreated(planId, merchant, planRef, amount, msg.sender);
        if (trialDays != 0) emit PlanTrial(planId, merchant, trialDays);
    }

    function getPlan(uint256 planId) external view returns (Plan memory) {
        return _plans[planId];
    }

    /// Stops new subscriptions to `planId`; existing subscriptions continue and renew. The
    /// plan's merchant, or the operator for a plan it created. Final: a plan cannot be
    /// reactivated.
    function deactivatePlan(uint256 planId) external {
        Plan storage plan = _plans[planId];
        if (plan.merchant == address(0)) revert UnknownPlan(planId);
        if (msg.sender != plan.merchant && !(msg.sender == operator && createdByOperator[planId])) {
            revert NotAuthorized();
        }
        if (!plan.active) revert PlanInactive(planId);
        plan.active = false;
        emit PlanDeactivated(planId, plan.merchant, msg.sender);
    }

    // -------------------------------------------------------- subscriptions

    /// Subscribes the caller to `planId` and charges the first period at once. `merchant`
    /// and `amount` are the terms the customer was shown (a wallet displays them): the call
    /// reverts with TermsMismatch when the plan pays someone else or another amount, and
    /// with PlanInactive when the plan was deactivated. It also reverts when the first
    /// payment cannot be pulled. `customerRef` ties the subscription to the checkout that
    /// produced it (never a raw merchant user id).
    function subscribe(uint256 planId, address merchant, uint256 amount, bytes32 customerRef)
        external
        nonReentrant
        returns (uint256 subscriptionId)
    {
        return _subscribe(planId, merchant, amount, customerRef);
    }

    /// `subscribe` with an EIP-2612 permit for this contract (issue 14: one signature and
    /// one transaction instead of approve + subscribe): the permit sets the caller's
    /// allowance to `permitValue`, then the subscription is created exactly as `subscribe`
    /// would. A permit that fails (someone already submitted it, or the token has no
    /// `permit`) is ignored: the subscription then needs the allowance to suffice anyway, and
    /// reverts FirstPaymentFailed(InsufficientAllowance) otherwise.
    function subscribeWithPermit(
        uint256 planId,
        address merchant,
        uint256 amount,
        bytes32 customerRef,
        uint256 permitValue,
        uint256 deadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external nonReentrant returns (uint256 subscriptionId) {
        try IERC20Permit(address(token)).permit(msg.sender, address(this), permitValue, deadline, v, r, s) {} catch {}
        return _subscribe(planId, merchant, amount, customerRef);
    }

    function _subscribe(uint256 planId, address merchant, uint256 amount, bytes32 customerRef)
        private
        returns (uint256 subscriptionId)
    {
        Plan memory plan = _plans[planId];
        if (plan.merchant == address(0)) revert UnknownPlan(planId);
        if (plan.merchant != merchant || plan.amount != amount) revert TermsMismatch(planId, merchant, amount);
        if (!plan.active) revert PlanInactive(planId);
        uint256 live = liveSubscriptionOf[planId][msg.sender];
        if (live != 0) revert AlreadySubscribed(live);

        liveSubscriptionOf[planId][msg.sender] = subscriptionId = ++subscriptionCount;
        uint64 start = uint64(block.timestamp);
        if (plan.trialDays != 0 && !trialUsed[planId][msg.sender]) {
            _startTrial(subscriptionId, planId, plan, customerRef, start);
            return subscriptionId;
        }

        // Effects first; a failed first pull reverts them all.
        uint64 end = addMonths(start, 1);
        _subscriptions[subscriptionId] = Subscription({
            planId: planId,
            subscriber: msg.sender,
            paid: uint96(plan.amount),
            merchant: plan.merchant,
            refunded: 0,
            amount: plan.amount,
            customerRef: customerRef,
            anchor: start,
            periodStart: start,
            periodEnd: end,
            period: 1,
            failedAttempts: 0,
            lastFailureAt: 0,
            status: Status.Active,
            cancelAtPeriodEnd: false,
            pendingPlanId: 0
        });

        FailureReason reason = _pull(msg.sender, plan.merchant, plan.amount);
        if (reason != FailureReason.None) revert FirstPaymentFailed(reason);

        emit SubscriptionCreated(
            subscriptionId, plan.merchant, msg.sender, planId, customerRef, plan.amount, start, end, 0
        );
        emit SubscriptionCharged(subscriptionId, plan.merchant, msg.sender, planId, plan.amount, 1, start, end, 1);
    }

    /// A trial subscription (trial rule): no pull, but the allowance must already cover the
    /// first charge.
    function _startTrial(uint256 subscriptionId, uint256 planId, Plan memory plan, bytes32 customerRef, uint64 start)
        private
    {
        if (token.allowance(msg.sender, address(this)) < plan.amount) {
            revert FirstPaymentFailed(FailureReason.InsufficientAllowance);
        }
        trialUsed[planId][msg.sender] = true;
        uint64 trialEnd = start + uint64(plan.trialDays) * 1 days;
        _subscriptions[subscriptionId] = Subscription({
            planId: planId,
            subscriber: msg.sender,
            paid: 0,
            merchant: plan.merchant,
            refunded: 0,
            amount: plan.amount,
            customerRef: customerRef,
            anchor: trialEnd,
            periodStart: start,
            periodEnd: trialEnd,
            period: 0,
            failedAttempts: 0,
            lastFailureAt: 0,
            status: Status.Trialing,
            cancelAtPeriodEnd: false,
            pendingPlanId: 0
        });
        emit SubscriptionCreated(
            subscriptionId, plan.merchant, msg.sender, planId, customerRef, plan.amount, start, trialEnd, trialEnd
        );
    }

    /// Processes a due period. Callable by anyone (the keeper) once the current period has
    /// ended. A cancel-at-period-end subscription is ended; otherwise the next period is
    /// pulled. A failed pull does not revert: it is recorded and `PaymentFailed` is emitted.
    function charge(uint256 subscriptionId) external nonReentrant {
        _charge(subscriptionId, true);
    }

    /// Charges many subscriptions in one transaction (the keeper's renewals, issue 13): each
    /// id is processed exactly as `charge(id)` processes it — the same state change and the
    /// same events, a failed pull recorded as `PaymentFailed` — except that an id `charge`
    /// would refuse (unknown, not live, not due yet) is skipped instead of reverting, so no
    /// id can revert the others. An id listed twice is processed twice, as two `charge` calls
    /// would be (the second is skipped unless yet another period is due). An id was acted on
    /// iff the transaction carries a `SubscriptionCharged`, `PaymentFailed` or
    /// `SubscriptionEnded` for it. Returns the number of ids acted on.
    function chargeMany(uint256[] calldata subscriptionIds) external nonReentrant returns (uint256 acted) {
        uint256 n = subscriptionIds.length;
        for (uint256 i; i < n;) {
            if (_charge(subscriptionIds[i], false)) acted++;
            unchecked {
                ++i;
            }
        }
    }

    /// Marks the subscription to end when the current period is over. Subscriber, merchant,
    /// or the operator for a plan it created.
    function cancelAtPeriodEnd(uint256 subscriptionId) external nonReentrant {
        Subscription storage s = _live(subscriptionId);
        _mayCancel(s);
        if (s.cancelAtPeriodEnd) revert AlreadyCancelling(subscriptionId);
        s.cancelAtPeriodEnd = true;
        s.pendingPlanId = 0;
        emit CancelAtPeriodEndSet(subscriptionId, s.merchant, s.subscriber, s.planId, msg.sender, s.periodEnd);
    }

    /// Cancels at once. Subscriber, merchant, or the operator for a plan it created.
    function cancel(uint256 subscriptionId) external nonReentrant {
        Subscription storage s = _live(subscriptionId);
        _mayCancel(s);
        _cancel(subscriptionId, s);
    }

    // ---------------------------------------------------------- plan changes

    /// Moves the caller's Active subscription to `newPlanId` (plan-change rule above).
    /// `merchant` and `amount` are the terms the subscriber was shown, as in `subscribe`. An
    /// upgrade takes effect now and pulls the proration (reverting ProrationFailed when it
    /// cannot); a downgrade is scheduled for the next renewal.
    function changePlan(uint256 subscriptionId, uint256 newPlanId, address merchant, uint256 amount)
        external
        nonReentrant
    {
        Subscription storage s = _live(subscriptionId);
        if (msg.sender != s.subscriber) revert NotAuthorized();
        if (s.status != Status.Active) revert NotActive(subscriptionId);
        if (s.cancelAtPeriodEnd) revert AlreadyCancelling(subscriptionId);
        Plan memory plan = _plans[newPlanId];
        if (plan.merchant == address(0)) revert UnknownPlan(newPlanId);
        if (plan.merchant != merchant || plan.amount != amount || merchant != s.merchant) {
            revert TermsMismatch(newPlanId, merchant, amount);
        }
        if (!plan.active) revert PlanInactive(newPlanId);
        if (newPlanId == s.planId) revert SamePlan(newPlanId);
        uint256 live = liveSubscriptionOf[newPlanId][msg.sender];
        if (live != 0) revert AlreadySubscribed(live);

        if (amount <= s.amount) {
            s.pendingPlanId = uint64(newPlanId);
            emit PlanChangeScheduled(
                subscriptionId, s.merchant, s.subscriber, s.planId, newPlanId, amount, s.periodEnd
            );
            return;
        }
        uint256 left = block.timestamp < s.periodEnd ? s.periodEnd - block.timestamp : 0;
        uint256 proration = (amount - s.amount) * left / (s.periodEnd - s.periodStart);
        uint256 previousPlanId = s.planId;
        _movePlan(subscriptionId, s, newPlanId, amount);
        s.paid += uint96(proration);
        if (proration != 0) {
            FailureReason reason = _pull(s.subscriber, s.merchant, proration);
            if (reason != FailureReason.None) revert ProrationFailed(reason);
        }
        emit PlanChanged(
            subscriptionId, s.merchant, s.subscriber, newPlanId, previousPlanId, amount, proration, s.period
        );
    }

    /// Undoes the caller's scheduled plan change.
    function cancelPlanChange(uint256 subscriptionId) external nonReentrant {
        Subscription storage s = _live(subscriptionId);
        if (msg.sender != s.subscriber) revert NotAuthorized();
        uint256 pending = s.pendingPlanId;
        if (pending == 0) revert NoPlanChange(subscriptionId);
        s.pendingPlanId = 0;
        emit PlanChangeCancelled(subscriptionId, s.merchant, s.subscriber, s.planId, pending);
    }

    // -------------------------------------------------------------- refunds

    /// The merchant refunds `amount` of `period`, the subscription's latest charged period
    /// (refund rule above), pulling it from the merchant's wallet; `cancelSubscription` also
    /// cancels a live subscription at once.
    function refund(uint256 subscriptionId, uint32 period, uint256 amount, bool cancelSubscription)
        external
        nonReentrant
    {
        _refund(subscriptionId, period, amount, cancelSubscription);
    }

    /// `refund` with an EIP-2612 permit from the merchant's wallet for this contract (a
    /// permit that fails is ignored, as in `subscribeWithPermit`).
    function refundWithPermit(
        uint256 subscriptionId,
        uint32 period,
        uint256 amount,
        bool cancelSubscription,
        uint256 permitValue,
        uint256 deadline,
        uint8 v,
        bytes32 r,
        bytes32 s
    ) external nonReentrant {
        try IERC20Permit(address(token)).permit(msg.sender, address(this), permitValue, deadline, v, r, s) {} catch {}
        _refund(subscriptionId, period, amount, cancelSubscription);
    }

    function _refund(uint256 subscriptionId, uint32 period, uint256 amount, bool cancelSubscription) private {
        Subscription storage s = _subscriptions[subscriptionId];
        if (s.status == Status.None) revert UnknownSubscription(subscriptionId);
        if (msg.sender != s.merchant) revert NotAuthorized();
        if (period == 0 || period != s.period) revert NotRefundable(s.period);
        if (amount == 0) revert InvalidAmount();
        uint256 refundable = s.paid - s.refunded;
        if (amount > refundable) revert RefundTooLarge(refundable);
        uint96 total = s.refunded + uint96(amount);
        s.refunded = total;
        bool cancelling = cancelSubscription && (s.status == Status.Active || s.status == Status.PastDue);
        FailureReason reason = _pull(msg.sender, s.subscriber, amount);
        if (reason != FailureReason.None) revert RefundFailed(reason);
        emit SubscriptionRefunded(subscriptionId, s.merchant, s.subscriber, s.planId, period, amount, total);
        if (cancelling) _cancel(subscriptionId, s);
    }

    function getSubscription(uint256 subscriptionId) external view returns (Subscription memory) {
        return _subscriptions[subscriptionId];
    }

    /// The earliest time `charge` will act on a live subscription: the period end, or for a
    /// past-due one, RETRY_INTERVAL after the last failed attempt.
    function nextAttemptAt(uint256 subscriptionId) public view returns (uint64) {
        Subscription storage s = _subscriptions[subscriptionId];
        if (s.status == Status.PastDue && !s.cancelAtPeriodEnd) {
            uint64 retryAt = s.lastFailureAt + RETRY_INTERVAL;
            return retryAt > s.periodEnd ? retryAt : s.periodEnd;
        }
        return s.periodEnd;
    }

    // ------------------------------------------------------------- calendar

    /// `anchor` moved forward by `months` calendar months, keeping the time of day and
    /// clamping the anchor's day of month to the target month's length.
    function addMonths(uint64 anchor, uint256 months) public pure returns (uint64) {
        (uint256 y, uint256 m, uint256 d) = _civilFromDays(anchor / 86400);
        uint256 secondsOfDay = anchor % 86400;
        uint256 total = (m - 1) + months;
        uint256 ny = y + total / 12;
        uint256 nm = total % 12 + 1;
        uint256 dim = _daysInMonth(ny, nm);
        uint256 nd = d < dim ? d : dim;
        return uint64(_daysFromCivil(ny, nm, nd) * 86400 + secondsOfDay);
    }

    // ------------------------------------------------------------ internals

    /// The subscriber, the merchant, or the operator acting for the merchant on a plan the
    /// operator created.
    function _mayCancel(Subscription storage s) private view {
        if (msg.sender == s.subscriber || msg.sender == s.merchant) return;
        if (msg.sender == operator && createdByOperator[s.planId]) return;
        revert NotAuthorized();
    }

    function _live(uint256 subscriptionId) private view returns (Subscription storage s) {
        s = _subscriptions[subscriptionId];
        if (s.status == Status.None) revert UnknownSubscription(subscriptionId);
        if (!_isLive(s.status)) revert NotLive(subscriptionId);
    }

    function _isLive(Status status) private pure returns (bool) {
        return status == Status.Active || status == Status.PastDue || status == Status.Trialing;
    }

    function _cancel(uint256 subscriptionId, Subscription storage s) private {
        s.status = Status.Cancelled;
        s.pendingPlanId = 0;
        liveSubscriptionOf[s.planId][s.subscriber] = 0;
        emit SubscriptionCancelled(subscriptionId, s.merchant, s.subscriber, s.planId, msg.sender);
    }

    /// Moves the subscription (and its wallet's live slot) to `planId` at `amount`.
    function _movePlan(uint256 subscriptionId, Subscription storage s, uint256 planId, uint256 amount) private {
        liveSubscriptionOf[s.planId][s.subscriber] = 0;
        liveSubscriptionOf[planId][s.subscriber] = subscriptionId;
        s.planId = planId;
        s.amount = amount;
        s.pendingPlanId = 0;
    }

    /// `charge` of one id. `strict`: revert when the id cannot be charged now (`charge`);
    /// otherwise return false and change nothing (`chargeMany`). True when it acted.
    function _charge(uint256 subscriptionId, bool strict) private returns (bool) {
        Subscription storage s = _subscriptions[subscriptionId];
        Status status = s.status;
        if (!_isLive(status)) {
            if (!strict) return false;
            if (status == Status.None) revert UnknownSubscription(subscriptionId);
            revert NotLive(subscriptionId);
        }
        uint64 dueAt = nextAttemptAt(subscriptionId);
        if (block.timestamp < dueAt) {
            if (!strict) return false;
            revert NotDue(dueAt);
        }

        if (s.cancelAtPeriodEnd) {
            _end(subscriptionId, s, EndReason.CancelAtPeriodEnd);
            return true;
        }

        (uint32 period, uint64 start, uint64 end) = _periodToCharge(s);
        if (period == 0) {
            // Past-due rule: the owed period is over and was never paid; no pull for time gone by.
            _end(subscriptionId, s, EndReason.PaymentFailed);
            return true;
        }
        if (s.pendingPlanId != 0) _applyScheduledChange(subscriptionId, s, period);
        FailureReason reason = _shortfall(s.subscriber, s.amount);
        if (reason == FailureReason.None) {
            if (_renew(subscriptionId, s, period, start, end)) return true;
            reason = FailureReason.TransferFailed;
        }
        _fail(subscriptionId, s, reason);
        return true;
    }

    /// The period a charge now pays for, [start, end): the next one, or when that one is over
    /// already, the one that contains now (catch-up rule). Period 0 when the subscription is
    /// past due and the period it owes is over (past-due rule).
    function _periodToCharge(Subscription storage s) private view returns (uint32 period, uint64 start, uint64 end) {
        period = s.period + 1;
        start = s.periodEnd;
        end = addMonths(s.anchor, period);
        if (end > block.timestamp) return (period, start, end);
        if (s.status == Status.PastDue) return (0, 0, 0);
        do {
            start = end;
            end = addMonths(s.anchor, ++period);
        } while (end <= block.timestamp);
    }

    /// The scheduled downgrade, applied at the first charge attempt of `period` (or dropped
    /// when the wallet meanwhile holds a live subscription to the target plan).
    function _applyScheduledChange(uint256 subscriptionId, Subscription storage s, uint32 period) private {
        uint256 newPlanId = s.pendingPlanId;
        if (liveSubscriptionOf[newPlanId][s.subscriber] != 0) {
            s.pendingPlanId = 0;
            emit PlanChangeCancelled(subscriptionId, s.merchant, s.subscriber, s.planId, newPlanId);
            return;
        }
        uint256 previousPlanId = s.planId;
        uint256 amount = _plans[newPlanId].amount;
        _movePlan(subscriptionId, s, newPlanId, amount);
        emit PlanChanged(subscriptionId, s.merchant, s.subscriber, newPlanId, previousPlanId, amount, 0, period);
    }

    /// Records a failed pull of the next period and emits PaymentFailed; ends the subscription
    /// when the subscriber's own failures are exhausted.
    function _fail(uint256 subscriptionId, Subscription storage s, FailureReason reason) private {
        // Not the subscriber's fault (allowance and balance sufficed): wait, but do not count.
        bool counted = reason != FailureReason.TransferFailed;
        uint8 attempt = counted ? s.failedAttempts + 1 : s.failedAttempts;
        s.failedAttempts = attempt;
        s.lastFailureAt = uint64(block.timestamp);
        s.status = Status.PastDue;
        bool exhausted = counted && attempt >= MAX_PAYMENT_ATTEMPTS;
        uint64 nextRetryAt = exhausted ? 0 : uint64(block.timestamp) + RETRY_INTERVAL;
        emit PaymentFailed(
            subscriptionId, s.merchant, s.subscriber, s.planId, s.amount, s.period + 1, attempt, reason, nextRetryAt
        );
        if (exhausted) _end(subscriptionId, s, EndReason.PaymentFailed);
    }

    /// Records `period` ([start, end)) as paid, then pulls it (effects before the token call)
    /// and emits SubscriptionCharged. When the token refuses the transfer, puts the
    /// subscription back as it was and returns false.
    function _renew(uint256 subscriptionId, Subscription storage s, uint32 period, uint64 start, uint64 end)
        private
        returns (bool)
    {
        (uint32 paidPeriod, uint64 paidStart, uint64 paidEnd) = (s.period, s.periodStart, s.periodEnd);
        (uint8 failed, uint64 lastFailureAt, Status status) = (s.failedAttempts, s.lastFailureAt, s.status);
        s.period = period;
        s.periodStart = start;
        s.periodEnd = end;
        s.failedAttempts = 0;
        s.lastFailureAt = 0;
        s.status = Status.Active;
        if (_transfer(s.subscriber, s.merchant, s.amount)) {
            // The refund limit of the new period (written after the pull: nothing reentrant
            // can reach `refund` while this call holds the lock).
            s.paid = uint96(s.amount);
            if (s.refunded != 0) s.refunded = 0;
            emit SubscriptionCharged(
                subscriptionId, s.merchant, s.subscriber, s.planId, s.amount, period, start, end, failed + 1
            );
            return true;
        }
        s.period = paidPeriod;
        s.periodStart = paidStart;
        s.periodEnd = paidEnd;
        s.failedAttempts = failed;
        s.lastFailureAt = lastFailureAt;
        s.status = status;
        return false;
    }

    function _end(uint256 subscriptionId, Subscription storage s, EndReason reason) private {
        s.status = Status.Ended;
        s.pendingPlanId = 0;
        liveSubscriptionOf[s.planId][s.subscriber] = 0;
        emit SubscriptionEnded(subscriptionId, s.merchant, s.subscriber, s.planId, reason);
    }

    /// Pulls `amount` from `from` to `to`; reports why it could not instead of reverting.
    function _pull(address from, address to, uint256 amount) private returns (FailureReason) {
        FailureReason reason = _shortfall(from, amount);
        if (reason != FailureReason.None) return reason;
        return _transfer(from, to, amount) ? FailureReason.None : FailureReason.TransferFailed;
    }

    /// The subscriber's own shortfall for a pull of `amount`, if any (reads only).
    function _shortfall(address from, uint256 amount) private view returns (FailureReason) {
        if (token.allowance(from, address(this)) < amount) return FailureReason.InsufficientAllowance;
        if (token.balanceOf(from) < amount) return FailureReason.InsufficientBalance;
        return FailureReason.None;
    }

    /// `transferFrom`, true only when the token accepted it: the call succeeded and returned
    /// nothing (tokens that predate the boolean) or a word equal to 1. Any other answer (false,
    /// fewer than 32 bytes, a word that is not a boolean) is a refusal, never a revert.
    function _transfer(address from, address to, uint256 amount) private returns (bool) {
        (bool ok, bytes memory ret) =
            address(token).call(abi.encodeWithSelector(IERC20.transferFrom.selector, from, to, amount));
        if (!ok) return false;
        if (ret.length == 0) return address(token).code.length > 0;
        if (ret.length < 32) return false;
        return abi.decode(ret, (uint256)) == 1;
    }

    // Howard Hinnant's days_from_civil / civil_from_days, for dates on or after 1970-01-01.
    function _civilFromDays(uint256 z) private pure returns (uint256 y, uint256 m, uint256 d) {
        z += 719468;
        uint256 era = z / 146097;
        uint256 doe = z - era * 146097;
        uint256 yoe = (doe - doe / 1460 + doe / 36524 - doe / 146096) / 365;
        y = yoe + era * 400;
        uint256 doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        uint256 mp = (5 * doy + 2) / 153;
        d = doy - (153 * mp + 2) / 5 + 1;
        m = mp < 10 ? mp + 3 : mp - 9;
        if (m <= 2) y += 1;
    }

    function _daysFromCivil(uint256 y, uint256 m, uint256 d) private pure returns (uint256) {
        if (m <= 2) y -= 1;
        uint256 era = y / 400;
        uint256 yoe = y - era * 400;
        uint256 mp = m > 2 ? m - 3 : m + 9;
        uint256 doy = (153 * mp + 2) / 5 + d - 1;
        uint256 doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
        return era * 146097 + doe - 719468;
    }

    function _daysInMonth(uint256 y, uint256 m) private pure returns (uint256) {
        if (m == 2) return (y % 4 == 0 && (y % 100 != 0 || y % 400 == 0)) ? 29 : 28;
        if (m == 4 || m == 6 || m == 9 || m == 11) return 30;
        return 31;
    }
}
