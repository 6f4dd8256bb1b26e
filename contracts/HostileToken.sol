// SPDX-License-Identifier: MIT
pragma solidity ^0.8.24;

/// @title HostileToken
/// @notice TEST ONLY: an ERC-20 that misbehaves on purpose, to prove SubscriptionManager's
/// guards. In `ReturnFalse` mode transferFrom reports failure without reverting; in `Reenter`
/// mode it first calls `target` with `reentryCall` (e.g. SubscriptionManager.charge) and
/// records whether that nested call succeeded and what it returned; in `ShortReturn` mode it
/// answers one byte instead of a boolean (a malformed answer) and moves nothing.
///
/// Its first storage slots are MockUSDC's (totalSupply, balanceOf, allowance), so a test can
/// put this code at a deployed MockUSDC's address (`anvil_setCode`): balances and allowances
/// stay readable, transfers fail in `ReturnFalse` mode, and MockUSDC's code put back finds
/// its state as it was.
contract HostileToken {
    enum Mode {
        Normal,
        ReturnFalse,
        Reenter,
        ShortReturn
    }

    uint256 public totalSupply;
    mapping(address => uint256) public balanceOf;
    mapping(address => mapping(address => uint256)) public allowance;
    /// MockUSDC's `nonces` slot: never written here (`mode` and the rest come after it).
    mapping(address => uint256) private unusedNonces;

    Mode public mode;
    address public target;
    bytes public reentryCall;
    bool public reentered;
    bool public lastReentryOk;
    bytes public lastReentryReturn;

    function mint(address to, uint256 amount) external {
        balanceOf[to] += amount;
    }

    function approve(address spender, uint256 amount) external returns (bool) {
        allowance[msg.sender][spender] = amount;
        return true;
    }

    function setMode(Mode mode_, address target_, bytes calldata reentryCall_) external {
        mode = mode_;
        target = target_;
        reentryCall = reentryCall_;
    }

    function transferFrom(address from, address to, uint256 amount) external returns (bool) {
        if (mode == Mode.ReturnFalse) return false;
        if (mode == Mode.ShortReturn) {
            assembly {
                mstore(0, shl(248, 1))
                return(0, 1)
            }
        }
        if (mode == Mode.Reenter) {
            reentered = true;
            (lastReentryOk, lastReentryReturn) = target.call(reentryCall);
        }
        allowance[from][msg.sender] -= amount;
        balanceOf[from] -= amount;
        balanceOf[to] += amount;
        return true;
    }
}
