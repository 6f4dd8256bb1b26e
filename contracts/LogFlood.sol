// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title LogFlood
/// @notice TEST ONLY: emits SubscriptionManager's own events (same signatures) without any
/// state, so a test can build a block with tens of thousands of logs — far more than real
/// subscriptions could fill on anvil in a test's time. Installed at the manager's address
/// with `anvil_setCode`, its logs are indistinguishable to the indexer from the manager's.
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
        uint64 periodEnd
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

    /// Emits plan `planId` for `merchant`, then `count` subscriptions to it from `firstId`
    /// on (each `SubscriptionCreated` then `SubscriptionCharged` of period 1, as `subscribe`
    /// emits them), each from a subscriber address of its own.
    function flood(uint256 planId, address merchant, uint256 amount, uint256 firstId, uint256 count) external {
        emit PlanCreated(planId, merchant, bytes32(planId), amount, msg.sender);
        uint64 start = uint64(block.timestamp);
        uint64 end = start + 30 days;
        for (uint256 id = firstId; id < firstId + count; ++id) {
            address subscriber = address(uint160(0x5100000000 + id));
            emit SubscriptionCreated(id, merchant, subscriber, planId, bytes32(id), amount, start, end);
            emit SubscriptionCharged(id, merchant, subscriber, planId, amount, 1, start, end, 1);
        }
    }
}
