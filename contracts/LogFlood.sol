// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title LogFlood
/// @notice TEST ONLY: emits SubscriptionManager's own events (same signatures) without any
/// state, so a test can build a block with tens of thousands of logs — far more than real
/// subscriptions could fill on anvil in a test's time. Installed at the manager's address
/// with `anvil_setCode`, its logs are indistinguishable to the indexer from the manager's.
/// The 50k-events-in-one-block test and the indexer benchmark's generated chains use it.
contract LogFlood {
    event PlanCreated(
        uint256 indexed planId, address indexed merchant, bytes32 indexed planRef, uint256 amount, address createdBy
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
        uint8 reason,
        uint64 nextRetryAt
    );

    /// Plans created through `createPlan` (numbered from 1e9 up, clear of `flood`'s ids),
    /// under key "live". A mapping, so the count lives far from the slots the manager's own
    /// constructor wrote at this address (slot 0 holds its operator).
    mapping(bytes32 => uint256) public counters;

    /// Emits plan `planId` for `merchant` (with `withPlan`), then `count` subscriptions to it
    /// from `firstId` on (each `SubscriptionCreated` then `SubscriptionCharged` of period 1,
    /// as `subscribe` emits them), each from a subscriber address of its own, periods starting
    /// at `start`.
    function flood(
        uint256 planId,
        address merchant,
        uint256 amount,
        uint256 firstId,
        uint256 count,
        uint64 start,
        bool withPlan
    ) external {
        if (withPlan) emit PlanCreated(planId, merchant, bytes32(planId), amount, msg.sender);
        uint64 end = start + 30 days;
        for (uint256 id = firstId; id < firstId + count; ++id) {
            address subscriber = _subscriber(id);
            emit SubscriptionCreated(id, merchant, subscriber, planId, bytes32(id), amount, start, end, 0);
            emit SubscriptionCharged(id, merchant, subscriber, planId, amount, 1, start, end, 1);
        }
    }

    /// The renewals of `flood`'s subscriptions `firstId..firstId+count` (period 2 from
    /// `start`): every `failEvery`-th one fails for lack of balance (`PaymentFailed`, attempt
    /// 1), the others are charged.
    function renew(
        uint256 planId,
        address merchant,
        uint256 amount,
        uint256 firstId,
        uint256 count,
        uint256 failEvery,
        uint64 start
    ) external {
        uint64 end = start + 30 days;
        for (uint256 id = firstId; id < firstId + count; ++id) {
            address subscriber = _subscriber(id);
            if (failEvery != 0 && id % failEvery == 0) {
                emit PaymentFailed(id, merchant, subscriber, planId, amount, 2, 1, 2, uint64(block.timestamp) + 1 days);
            } else {
                emit SubscriptionCharged(id, merchant, subscriber, planId, amount, 2, start, end, 1);
            }
        }
    }

    /// `SubscriptionManager.createPlan`'s selector and event, so a caller written for the
    /// manager (a benchmark's live blocks, a reorg's replacement transaction) works unchanged.
    function createPlan(address merchant, uint256 amount, bytes32 planRef) external returns (uint256 planId) {
        planId = 1e9 + ++counters["live"];
        emit PlanCreated(planId, merchant, planRef, amount, msg.sender);
    }

    function _subscriber(uint256 id) private pure returns (address) {
        return address(uint160(0x5100000000 + id));
    }
}
