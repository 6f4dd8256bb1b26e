//! The operators' kit in `deploy/`: the systemd units pass `systemd-analyze verify` and a
//! security bound, the Prometheus alert rules pass `promtool check rules` and their unit tests
//! (`promtool test rules`), and every metric an alert or a Grafana dashboard panel names is
//! one the binaries export (a string literal of the name in their sources).
//! The tools come from Debian's `systemd` and `prometheus` packages (`scripts/apt-packages`).

use std::path::{Path, PathBuf};
use std::process::Command;

use chainsub_tests::{bin_path, scratch_dir, workspace_root};

fn deploy(dir: &str) -> PathBuf {
    workspace_root().join("deploy").join(dir)
}

/// Runs a tool; its output when it fails or says anything on stderr.
fn run(cmd: &mut Command) -> std::process::Output {
    let program = cmd.get_program().to_string_lossy().into_owned();
    cmd.output().unwrap_or_else(|e| {
        panic!(
            "{program}: {e}; install it with scripts/apt-packages (Debian's systemd and prometheus)"
        )
    })
}

fn files(dir: &Path, ext: &str) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == ext))
        .collect();
    out.sort();
    out
}

/// The units as installed, except that `ExecStart` names this build's binaries (verify
/// checks that the command exists and is executable).
fn units_with_built_binaries() -> Vec<PathBuf> {
    let dir = scratch_dir("systemd-units");
    let built = bin_path("api");
    let bin_dir = built.parent().unwrap().to_string_lossy().into_owned();
    files(&deploy("systemd"), "service")
        .into_iter()
        .map(|unit| {
            let text = std::fs::read_to_string(&unit).unwrap();
            let copy = dir.join(unit.file_name().unwrap());
            std::fs::write(
                &copy,
                text.replace("/usr/local/bin/", &format!("{bin_dir}/")),
            )
            .unwrap();
            copy
        })
        .collect()
}

#[test]
fn systemd_units_pass_systemd_analyze_verify_and_are_hardened() {
    let units = units_with_built_binaries();
    let names: Vec<String> = units
        .iter()
        .map(|u| u.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        names,
        [
            "chainsub-api.service",
            "chainsub-dispatch.service",
            "chainsub-indexer-standby.service",
            "chainsub-indexer.service",
            "chainsub-keeper.service",
        ]
    );
    let out = run(Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .args(&units));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success() && stderr.trim().is_empty(),
        "systemd-analyze verify: {}\n{stderr}",
        out.status
    );
    for unit in &units {
        // Exposure on systemd's 0 (locked down) to 10 (unprotected) scale (the threshold is
        // in tenths): at most 2.0, "OK".
        let out = run(Command::new("systemd-analyze")
            .args(["security", "--offline=yes", "--threshold=20", "--no-pager"])
            .arg(unit));
        assert!(
            out.status.success(),
            "{}: exposure above 2\n{}",
            unit.display(),
            String::from_utf8_lossy(&out.stdout)
        );
    }
    // Each unit's environment files exist beside it (as examples of /etc/chainsub/*.env).
    for unit in files(&deploy("systemd"), "service") {
        let text = std::fs::read_to_string(&unit).unwrap();
        for line in text.lines() {
            if let Some(path) = line.strip_prefix("EnvironmentFile=/etc/chainsub/") {
                assert!(
                    deploy("systemd").join(path).exists(),
                    "{}: deploy/systemd/{path} is missing",
                    unit.display()
                );
            }
        }
    }
}

#[test]
fn a_unit_with_a_mistake_fails_the_check() {
    let units = units_with_built_binaries();
    let broken = units[0].with_extension("broken.service");
    let text = std::fs::read_to_string(&units[0]).unwrap();
    std::fs::write(
        &broken,
        text.replace("Restart=on-failure", "Restartt=on-failure"),
    )
    .unwrap();
    let out = run(Command::new("systemd-analyze")
        .args(["verify", "--man=no"])
        .arg(&broken));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Unknown key"),
        "{out:?}"
    );
}

#[test]
fn alert_rules_pass_promtool_and_their_unit_tests() {
    let dir = deploy("prometheus");
    let out = run(Command::new("promtool")
        .args(["check", "rules", "alerts.yml"])
        .current_dir(&dir));
    assert!(out.status.success(), "promtool check rules: {out:?}");
    let out = run(Command::new("promtool")
        .args(["test", "rules", "alerts.test.yml"])
        .current_dir(&dir));
    assert!(
        out.status.success(),
        "promtool test rules:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The metric names in an alert expression: identifiers of ours followed by `{`, `[`, `)`,
/// a space or the end.
fn metric_names(expr: &str) -> Vec<String> {
    const OURS: [&str; 5] = ["indexer_", "keeper_", "api_", "chainsub_", "http_"];
    let mut out = Vec::new();
    let bytes = expr.as_bytes();
    let mut i = 0;
    while i < bytes.len() {
        let starts_word = i == 0 || !(bytes[i - 1].is_ascii_alphanumeric() || bytes[i - 1] == b'_');
        if starts_word && OURS.iter().any(|p| expr[i..].starts_with(p)) {
            let end = expr[i..]
                .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .map_or(expr.len(), |n| i + n);
            out.push(expr[i..end].to_string());
            i = end;
        } else {
            i += 1;
        }
    }
    out
}

/// Fails on a metric in `text` that no binary exports (a string literal of its name).
fn all_exported(what: &str, text: &str, sources: &str) -> usize {
    let mut named = 0;
    for line in text.lines().filter(|l| !l.trim_start().starts_with('#')) {
        for metric in metric_names(line) {
            named += 1;
            assert!(
                sources.contains(&format!("\"{metric}\"")),
                "{what} names {metric}, which no binary exports"
            );
        }
    }
    named
}

/// Every metric an alert (expression or annotation) or a dashboard panel names.
fn named_metrics() -> std::collections::BTreeSet<String> {
    let mut texts = vec![std::fs::read_to_string(deploy("prometheus").join("alerts.yml")).unwrap()];
    for board in files(&deploy("grafana"), "json") {
        let doc: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(board).unwrap()).unwrap();
        for panel in doc["panels"].as_array().expect("panels") {
            for t in panel["targets"].as_array().expect("targets") {
                texts.push(t["expr"].as_str().expect("expr").to_string());
            }
        }
    }
    texts
        .iter()
        .flat_map(|t| t.lines())
        .filter(|l| !l.trim_start().starts_with('#'))
        .flat_map(metric_names)
        .collect()
}

/// Asserts every metric the alerts and dashboards name is in `scraped` (the running
/// processes' `/metrics`): a sample line of it, or of its histogram or summary series.
pub(crate) fn assert_named_metrics_scraped(scraped: &str) {
    let exported: std::collections::BTreeSet<&str> = scraped
        .lines()
        .filter(|l| !l.starts_with('#') && !l.is_empty())
        .filter_map(|l| l.split(['{', ' ']).next())
        .collect();
    let missing: Vec<String> = named_metrics()
        .into_iter()
        .filter(|m| {
            !["", "_bucket", "_sum", "_count"]
                .iter()
                .any(|suffix| exported.contains(format!("{m}{suffix}").as_str()))
        })
        .collect();
    assert!(
        missing.is_empty(),
        "alerts or dashboards name metrics no running process exports: {missing:?}"
    );
}

#[test]
fn every_metric_an_alert_or_a_dashboard_names_is_exported_by_a_binary() {
    assert_eq!(
        metric_names("rate(api_requests_total{status=~\"5..\"}[5m]) / max(keeper_due)"),
        ["api_requests_total", "keeper_due"]
    );
    let sources = chainsub_tests::binary_sources().concat();
    // The alerts: expressions, and the annotations that tell the operator where to look.
    let rules = std::fs::read_to_string(deploy("prometheus").join("alerts.yml")).unwrap();
    let named = all_exported("alerts.yml", &rules, &sources);
    assert!(named >= 30, "only {named} metric names found in alerts.yml");
    // The dashboards: one per service, every panel with at least one query.
    let boards = files(&deploy("grafana"), "json");
    let titles: Vec<String> = boards
        .iter()
        .map(|b| b.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(
        titles,
        ["api.json", "indexer.json", "keeper.json", "webhooks.json"]
    );
    for board in &boards {
        let text = std::fs::read_to_string(board).unwrap();
        let doc: serde_json::Value = serde_json::from_str(&text).unwrap();
        let panels = doc["panels"].as_array().expect("panels");
        assert!(panels.len() >= 4, "{}", board.display());
        for panel in panels {
            let targets = panel["targets"].as_array().expect("targets");
            assert!(
                !targets.is_empty(),
                "{}: {}",
                board.display(),
                panel["title"]
            );
            for t in targets {
                let expr = t["expr"].as_str().expect("expr");
                let what = format!("{} panel {}", board.display(), panel["title"]);
                assert!(all_exported(&what, expr, &sources) > 0, "{what}: {expr}");
            }
        }
    }
}
