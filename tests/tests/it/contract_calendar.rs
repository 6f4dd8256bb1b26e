//! The contract's calendar against chrono: for random start instants (biased towards the
//! 28th-31st, leap years and December) and 1..=36 months, `SubscriptionManager.addMonths`
//! (an eth_call on a deployed contract) equals `chainsub_abi::add_months`.

use alloy::primitives::U256;
use chainsub_abi::SubscriptionManager;
use chainsub_tests::DevChain;
use chrono::{Datelike, NaiveDate};
use proptest::prelude::*;
use proptest::test_runner::{Config, TestRunner};

fn days_in_month(year: i32, month: u32) -> u32 {
    let first_of_next = if month == 12 {
        NaiveDate::from_ymd_opt(year + 1, 1, 1)
    } else {
        NaiveDate::from_ymd_opt(year, month + 1, 1)
    };
    first_of_next.unwrap().pred_opt().unwrap().day()
}

/// (year, month, day, second of day) with the interesting cases over-represented.
fn start_instant() -> impl Strategy<Value = (i32, u32, u32, u32)> {
    let year = prop_oneof![
        2 => 1970i32..=2199,
        // Leap years, including the century rules (2000 is one, 2100 is not).
        2 => (493i32..=549).prop_map(|q| q * 4),
        1 => prop::sample::select(vec![2000, 2100, 2024, 2023, 2096, 2104]),
    ];
    let month = prop_oneof![
        2 => 1u32..=12,
        1 => Just(12u32),
        1 => Just(1u32),
        1 => prop::sample::select(vec![2u32, 8]),
    ];
    let day = prop_oneof![1 => 1u32..=31, 3 => 28u32..=31];
    let second = prop_oneof![3 => 0u32..86_400, 1 => prop::sample::select(vec![0u32, 86_399])];
    (year, month, day, second).prop_map(|(y, m, d, s)| (y, m, d.min(days_in_month(y, m)), s))
}

fn unix(y: i32, m: u32, d: u32, s: u32) -> u64 {
    let t = NaiveDate::from_ymd_opt(y, m, d)
        .unwrap()
        .and_hms_opt(0, 0, 0)
        .unwrap()
        .and_utc()
        .timestamp();
    u64::try_from(t).unwrap() + u64::from(s)
}

#[test]
fn contract_add_months_matches_chrono_for_random_start_dates() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    // One anvil for every case.
    let chain = rt.block_on(DevChain::start());
    let manager = SubscriptionManager::new(chain.manager, chain.provider);

    let mut runner = TestRunner::new(Config {
        cases: 256,
        failure_persistence: None,
        ..Config::default()
    });
    runner
        .run(&(start_instant(), 1u32..=36), |((y, m, d, s), months)| {
            let anchor = unix(y, m, d, s);
            let on_chain = rt
                .block_on(async { manager.addMonths(anchor, U256::from(months)).call().await })
                .expect("eth_call addMonths");
            let expected = chainsub_abi::add_months(anchor, months).expect("in range");
            prop_assert_eq!(
                on_chain,
                expected,
                "{}-{:02}-{:02}+{}s plus {} months",
                y,
                m,
                d,
                s,
                months
            );
            Ok(())
        })
        .unwrap();
}

#[test]
fn contract_add_months_matches_chrono_on_known_edges() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let chain = rt.block_on(DevChain::start());
    let manager = SubscriptionManager::new(chain.manager, chain.provider);
    let call = |anchor: u64, months: u32| {
        rt.block_on(async { manager.addMonths(anchor, U256::from(months)).call().await })
            .unwrap()
    };

    // Jan 31 clamps to Feb 29 in a leap year, and the anchor day comes back in March.
    let jan31 = unix(2024, 1, 31, 45_000);
    assert_eq!(call(jan31, 1), unix(2024, 2, 29, 45_000));
    assert_eq!(call(jan31, 2), unix(2024, 3, 31, 45_000));
    // 2100 is not a leap year.
    assert_eq!(call(unix(2100, 1, 31, 0), 1), unix(2100, 2, 28, 0));
    // December rolls the year; 36 months lands three years on.
    assert_eq!(call(unix(2025, 12, 31, 1), 2), unix(2026, 2, 28, 1));
    assert_eq!(call(unix(2025, 12, 31, 1), 36), unix(2028, 12, 31, 1));
}
