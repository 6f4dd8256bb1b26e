//! The store's statements against a real, migrated Postgres database.

use chainsub_store::{events, plans, subscriptions};
use chainsub_tests::TestDb;

/// Every list statement pages by an index condition on its key even under a generic plan
/// (Postgres switches a prepared statement to one after five executions): otherwise each
/// `startingAfter` page reads every newer row of the merchant, and walking a list is
/// quadratic. `($n IS NULL OR key < $n)` fails this; `key < COALESCE($n, max)` passes.
#[tokio::test]
async fn every_list_statement_pages_by_an_index_condition_under_a_generic_plan() {
    let db = TestDb::create().await;
    let c = db.connect().await;
    // Plan shapes, not costs: on empty tables the planner would scan sequentially anyway.
    c.batch_execute("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off")
        .await
        .unwrap();
    let all = [
        ("subscriptions", subscriptions::list_statements()),
        ("events", events::list_statements()),
        ("plans", plans::list_statements()),
    ];
    let mut checked = 0;
    for (name, texts) in all {
        for (i, text) in texts.into_iter().enumerate() {
            let params = (1..=20)
                .take_while(|n| text.contains(&format!("${n}")))
                .count();
            c.batch_execute(&format!("DEALLOCATE ALL; PREPARE q AS {text}"))
                .await
                .unwrap_or_else(|e| panic!("{name}[{i}]: {e}\n{text}"));
            let nulls = vec!["NULL"; params].join(", ");
            let plan: Vec<String> = c
                .query(&format!("EXPLAIN EXECUTE q({nulls})"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            // The cursor comparison of this statement, as the plan prints it.
            let cursor = if let Some(at) = text.find("COALESCE($") {
                let n: String = text[at + 10..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                format!("COALESCE(${n}")
            } else {
                let at = text.find(" > $").expect("a keyset comparison");
                let n: String = text[at + 4..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                format!("> ${n}")
            };
            assert!(
                plan.iter()
                    .any(|l| l.contains("Index Cond") && l.contains(&cursor)),
                "{name}[{i}]: the cursor `{cursor}` is not an index condition:\n{}",
                plan.join("\n")
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 8 + 6 + 2);
}
