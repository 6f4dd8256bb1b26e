//! docs/integration.md's webhook snippets, run as a merchant would run them: the TypeScript
//! one type-checked (strict) and run with npm's `standardwebhooks`, the Python one with
//! PyPI's (`scripts/python-tools`), the Rust one compiled as
//! `chainsub_tests::receiver::verify_delivery` (the receiver of every test verifies with it):
//! each must accept every delivery of a test's story and refuse the same delivery with its
//! body changed. And docs/event-examples.md: one example body per event type, holding the
//! fields of every delivery of that type (`UPDATE_EVENT_EXAMPLES=1` writes it anew from the
//! deliveries).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::process::Command;

use chainsub_tests::receiver::{Delivery, verify_delivery};
use chainsub_tests::workspace_root;
use serde_json::{Value, json};

/// The fenced blocks of `lang` in `markdown`, in order.
fn blocks<'a>(markdown: &'a str, lang: &str) -> Vec<&'a str> {
    let open = format!("```{lang}\n");
    let mut out = Vec::new();
    let mut rest = markdown;
    while let Some(i) = rest.find(&open) {
        let body = &rest[i + open.len()..];
        let end = body.find("\n```").expect("a closed code block");
        out.push(&body[..=end]);
        rest = &body[end..];
    }
    out
}

/// `verify_delivery`'s source in tests/src/receiver.rs: from its doc comment to its end.
fn rust_source() -> String {
    let src = std::fs::read_to_string(workspace_root().join("tests/src/receiver.rs")).unwrap();
    let start = src
        .find("/// The event a delivery carries")
        .expect("verify_delivery's doc comment");
    let end = start + src[start..].find("\n}\n").expect("its end") + 3;
    src[start..end].to_string()
}

/// Runs a snippet runner; one `{"ok", "id", "type"}` or `{"ok": false}` per delivery.
fn run(mut cmd: Command, what: &str) -> Vec<Value> {
    let out = cmd.output().unwrap_or_else(|e| panic!("{what}: {e}"));
    assert!(
        out.status.success(),
        "{what} failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|_| panic!("{what}: {l}")))
        .collect()
}

/// Asserts each of the guide's three snippets accepts every one of `deliveries` (signed with
/// `secret`) and refuses one with its body changed.
pub(crate) fn assert_snippets_verify(deliveries: &[Delivery], secret: &str) {
    let root = workspace_root();
    let guide = std::fs::read_to_string(root.join("docs/integration.md")).unwrap();
    let rust = rust_source();
    assert!(
        blocks(&guide, "rust").iter().any(|b| b.contains(&rust)),
        "docs/integration.md shows verify_delivery as tests/src/receiver.rs has it:\n{rust}"
    );
    let [ts] = blocks(&guide, "ts")[..] else {
        panic!("one TypeScript block in docs/integration.md")
    };
    let [py] = blocks(&guide, "python")[..] else {
        panic!("one Python block in docs/integration.md")
    };

    let mut cases: Vec<Value> = deliveries
        .iter()
        .map(|d| {
            let headers: BTreeMap<String, String> = d
                .headers
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_str().unwrap().to_string()))
                .collect();
            json!({"body": String::from_utf8(d.body.to_vec()).unwrap(), "headers": headers})
        })
        .collect();
    let first = deliveries.first().expect("deliveries");
    let tampered_body =
        String::from_utf8(first.body.to_vec())
            .unwrap()
            .replacen("\"data\"", "\"data\" ", 1);
    assert_ne!(tampered_body.as_bytes(), &first.body[..]);
    cases.push(json!({"body": tampered_body, "headers": cases[0]["headers"]}));
    // The Rust one.
    for d in deliveries {
        let event = verify_delivery(secret, &d.body, &d.headers).unwrap();
        assert_eq!(event["id"], d.id.as_str());
    }
    assert!(verify_delivery(secret, tampered_body.as_bytes(), &first.headers).is_err());

    let dir = root.join("target/guide");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("verify.ts"), ts).unwrap();
    std::fs::write(dir.join("verify.py"), py).unwrap();
    let file = dir.join("deliveries.json");
    std::fs::write(&file, serde_json::to_vec(&cases).unwrap()).unwrap();
    let python = root.join("target/python-tools/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/python-tools (scripts/test does)",
        python.display()
    );
    let command = |program: &Path, runner: &str, snippet: &str| {
        let mut c = Command::new(program);
        c.current_dir(&root)
            .arg(runner)
            .arg(dir.join(snippet))
            .arg(&file)
            .env("CHAINSUB_WEBHOOK_SECRET", secret);
        c
    };
    for (lang, results) in [
        (
            "TypeScript",
            run(
                command(Path::new("node"), "tests/guide/run_ts.mjs", "verify.ts"),
                "the TypeScript snippet",
            ),
        ),
        (
            "Python",
            run(
                command(&python, "tests/guide/run_py.py", "verify.py"),
                "the Python snippet",
            ),
        ),
    ] {
        assert_eq!(results.len(), cases.len(), "{lang}: {results:?}");
        for (d, r) in deliveries.iter().zip(&results) {
            assert_eq!(r["ok"], true, "{lang} refused {}: {r}", d.id);
            assert_eq!(r["id"], d.id.as_str(), "{lang}");
            assert_eq!(r["type"], d.kind.as_str(), "{lang}");
        }
        let last = results.last().unwrap();
        assert_eq!(last["ok"], false, "{lang} accepted a changed body: {last}");
    }
}

/// Every field path of `v` (`data.subscription.status`; array items as `[]`), and those whose
/// value is `null`.
fn paths(v: &Value, prefix: &str, out: &mut BTreeSet<String>, nulls: &mut BTreeSet<String>) {
    match v {
        Value::Object(m) => {
            for (k, v) in m {
                let p = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                out.insert(p.clone());
                if v.is_null() {
                    nulls.insert(p.clone());
                }
                paths(v, &p, out, nulls);
            }
        }
        Value::Array(a) => {
            for v in a {
                paths(v, &format!("{prefix}[]"), out, nulls);
            }
        }
        _ => {}
    }
}

/// Whether `path` lies under one of `nulls` (a field that is an object in one body may be
/// `null` in another: `data.subscription.pendingPlanChange`).
fn under_null(path: &str, nulls: &BTreeSet<String>) -> bool {
    nulls.iter().any(|n| path.starts_with(&format!("{n}.")))
}

/// The examples of docs/event-examples.md by type.
fn examples_of(doc: &str) -> BTreeMap<String, Value> {
    blocks(doc, "json")
        .into_iter()
        .map(|b| {
            let v: Value = serde_json::from_str(b).expect("an example is JSON");
            (v["type"].as_str().expect("a type").to_string(), v)
        })
        .collect()
}

/// Asserts docs/event-examples.md holds an example of each type `deliveries` have, with the
/// fields each delivery of that type has (values differ from run to run; fields must not).
pub(crate) fn assert_examples_hold(deliveries: &[Delivery]) {
    let file = workspace_root().join("docs/event-examples.md");
    let mut by_kind: BTreeMap<&str, Vec<&Value>> = BTreeMap::new();
    for d in deliveries {
        by_kind.entry(d.kind.as_str()).or_default().push(&d.json);
    }
    if std::env::var("UPDATE_EVENT_EXAMPLES").is_ok_and(|v| v == "1") {
        // This story's types anew; the other stories' as they are.
        let mut all: BTreeMap<String, Value> = std::fs::read_to_string(&file)
            .map(|doc| examples_of(&doc))
            .unwrap_or_default();
        for (kind, bodies) in &by_kind {
            all.insert((*kind).to_string(), bodies[0].clone());
        }
        let mut doc = String::from(
            "# Example event bodies\n\n\
             One webhook body of each event type the end-to-end stories deliver on a local\n\
             chain (`tests/tests/it/e2e_billing.rs`: a trial, its conversion, an upgrade, a\n\
             downgrade, a refund, the cancellations; `e2e_lifecycle.rs`): ids, hashes and\n\
             times differ on yours, the fields do not — those tests check every delivery of\n\
             each type against these. The same objects are `GET /api/v1/events`' items. What\n\
             each type means: [integration.md](integration.md#6-the-event-catalogue);\n\
             `subscription.plan_change_cancelled` has the fields of\n\
             `subscription.plan_change_scheduled`, and `event.retracted` and `webhook.test` are\n\
             described in [events.md](events.md) and the OpenAPI document.\n",
        );
        for (kind, body) in &all {
            doc.push_str(&format!(
                "\n## `{kind}`\n\n```json\n{}\n```\n",
                serde_json::to_string_pretty(body).unwrap()
            ));
        }
        std::fs::write(&file, doc).unwrap();
    }
    let examples = examples_of(&std::fs::read_to_string(&file).unwrap());
    for (kind, bodies) in &by_kind {
        let example = examples.get(*kind).unwrap_or_else(|| {
            panic!(
                "docs/event-examples.md has no {kind} example (UPDATE_EVENT_EXAMPLES=1 writes it)"
            )
        });
        let (mut want, mut example_nulls) = (BTreeSet::new(), BTreeSet::new());
        paths(example, "", &mut want, &mut example_nulls);
        for body in bodies {
            let (mut got, mut nulls) = (BTreeSet::new(), BTreeSet::new());
            paths(body, "", &mut got, &mut nulls);
            let missing: Vec<_> = want
                .difference(&got)
                .filter(|p| !under_null(p, &nulls))
                .collect();
            let extra: Vec<_> = got
                .difference(&want)
                .filter(|p| !under_null(p, &example_nulls))
                .collect();
            assert!(
                missing.is_empty() && extra.is_empty(),
                "{kind}: the example's fields differ from a delivery's: missing {missing:?}, \
                 not in the example {extra:?} (UPDATE_EVENT_EXAMPLES=1 writes the examples anew)"
            );
        }
    }
}
