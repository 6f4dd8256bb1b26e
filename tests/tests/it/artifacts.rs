//! The committed ABI + bytecode under abi/artifacts are what a fresh solc compile of
//! contracts/ produces, so the Rust bindings and the deployed code never drift from the
//! Solidity source.

use std::path::Path;
use std::process::{Command, Output};

use chainsub_tests::workspace_root;

fn check_in(root: &Path) -> Output {
    Command::new("node")
        .arg(root.join("scripts/compile-contracts.mjs"))
        .arg("--check")
        .current_dir(root)
        .output()
        .expect("run node (is Node.js installed?)")
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

#[test]
fn committed_artifacts_match_a_fresh_compile() {
    let out = check_in(&workspace_root());
    assert!(
        out.status.success(),
        "abi/artifacts are stale; run `node scripts/compile-contracts.mjs`\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn check_fails_when_an_artifact_differs_from_the_source() {
    // A scratch copy of the workspace's contract inputs, with one artifact tampered with.
    let root = workspace_root();
    let scratch = std::env::temp_dir().join(format!("chainsub-artifacts-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&scratch);
    copy_dir(&root.join("scripts"), &scratch.join("scripts"));
    copy_dir(&root.join("contracts"), &scratch.join("contracts"));
    copy_dir(&root.join("abi/artifacts"), &scratch.join("abi/artifacts"));
    std::os::unix::fs::symlink(root.join("node_modules"), scratch.join("node_modules")).unwrap();
    let untouched = check_in(&scratch);
    let artifact = scratch.join("abi/artifacts/SubscriptionManager.json");
    let text = std::fs::read_to_string(&artifact).unwrap();
    // Flip one byte of the bytecode, as a stale artifact would differ.
    let tampered = text.replacen("\"object\": \"0x6", "\"object\": \"0x7", 1);
    assert_ne!(tampered, text, "artifact layout changed; update this test");
    std::fs::write(&artifact, tampered).unwrap();

    let out = check_in(&scratch);
    let _ = std::fs::remove_dir_all(&scratch);

    assert!(
        untouched.status.success(),
        "the untouched copy checks clean"
    );
    assert_eq!(out.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&out.stderr)
            .contains("stale: abi/artifacts/SubscriptionManager.json"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
