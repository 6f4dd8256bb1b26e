//! Every setting a binary reads is in docs/operations.md's tables, and every setting the
//! tables document is one a binary reads.

use std::collections::BTreeSet;

use chainsub_tests::workspace_root;

/// Settings read but not for operators: fault injection used by the tests (hidden flags).
const TEST_ONLY: [&str; 2] = ["API_FAIL_POINT", "KEEPER_FAIL_POINT"];
/// Read by a library rather than by our code: `tracing`'s filter.
const READ_BY_LIBRARIES: [&str; 1] = ["RUST_LOG"];

fn upper_names_after(text: &str, marker: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for (i, _) in text.match_indices(marker) {
        let rest = &text[i + marker.len()..];
        let name: String = rest
            .chars()
            .take_while(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')
            .collect();
        if rest[name.len()..].starts_with('"') && !name.is_empty() {
            out.insert(name);
        }
    }
    out
}

fn read_by_binaries() -> BTreeSet<String> {
    let mut names = BTreeSet::new();
    for text in chainsub_tests::binary_sources() {
        // clap's `env = "NAME"`, and the few read directly.
        names.extend(upper_names_after(&text, "env = \""));
        names.extend(upper_names_after(&text, "env::var(\""));
        names.extend(upper_names_after(&text, "env::var_os(\""));
    }
    // A test's own switch, read by a unit test in a library's src.
    names.remove("CHAINSUB_WRITE_GENERATED");
    for t in TEST_ONLY {
        assert!(
            names.remove(t),
            "{t} is not read any more: drop it from TEST_ONLY"
        );
    }
    names.extend(READ_BY_LIBRARIES.iter().map(|s| s.to_string()));
    names
}

/// The names in the first column of the settings tables (`| `A` / `B` | default | … |`).
fn documented() -> BTreeSet<String> {
    let text = std::fs::read_to_string(workspace_root().join("docs/operations.md")).unwrap();
    let mut out = BTreeSet::new();
    for line in text.lines().filter(|l| l.starts_with("| `")) {
        let first = line.split('|').nth(1).unwrap_or("");
        for part in first.split('`').skip(1).step_by(2) {
            if !part.is_empty()
                && part
                    .chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
            {
                out.insert(part.to_string());
            }
        }
    }
    out
}

#[test]
fn every_setting_a_binary_reads_is_documented_and_every_documented_one_is_read() {
    let read = read_by_binaries();
    let documented = documented();
    assert!(read.len() > 80, "only {} settings found", read.len());
    let undocumented: Vec<_> = read.difference(&documented).collect();
    assert!(
        undocumented.is_empty(),
        "read by a binary, not in docs/operations.md's tables: {undocumented:?}"
    );
    let unknown: Vec<_> = documented.difference(&read).collect();
    assert!(
        unknown.is_empty(),
        "in docs/operations.md's tables, read by no binary: {unknown:?}"
    );
}
