//! The process's Prometheus recorder, shared by every binary (`api`, `indexer`, `keeper`).
//!
//! A histogram sample is kept raw until the recorder's *upkeep* folds it into its summary.
//! `metrics-exporter-prometheus` runs upkeep only when `/metrics` is rendered or when its own
//! HTTP exporter is installed; we serve `/metrics` ourselves, and on an optional listener, so
//! a process nobody scrapes would keep every request's latency sample forever (8 bytes per
//! request: ~0.7 GB a day at 1,000 req/s). [`install`] starts the upkeep on a thread of its
//! own, whatever runtime the caller has.

use std::sync::OnceLock;
use std::time::Duration;

use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// How often the upkeep thread drains histogram samples.
pub const UPKEEP_INTERVAL: Duration = Duration::from_secs(5);

/// The name of the upkeep thread (visible in `/proc/<pid>/task/*/comm`).
pub const UPKEEP_THREAD: &str = "metrics-upkeep";

/// Installs the global Prometheus recorder once per process and starts its upkeep thread;
/// later calls return the same handle (tests start several servers in one process). `None`
/// when another recorder was installed first.
pub fn install() -> Option<PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| {
            let handle = PrometheusBuilder::new().install_recorder().ok()?;
            let upkeep = handle.clone();
            std::thread::Builder::new()
                .name(UPKEEP_THREAD.into())
                .spawn(move || {
                    loop {
                        std::thread::sleep(UPKEEP_INTERVAL);
                        upkeep.run_upkeep();
                    }
                })
                .ok()?;
            Some(handle)
        })
        .clone()
}

/// Registers `counters` at zero. A counter is on a scrape only after its first increment,
/// and an alert on the increase of one that never counted (a deep reorg, a lost transaction)
/// has no series to read until then; registered at start, every counter a process can count
/// is on its first scrape. Adds nothing to a counter that counts already.
pub fn register_counters(counters: &[&'static str]) {
    for name in counters {
        metrics::counter!(*name).increment(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn thread_names() -> Vec<String> {
        std::fs::read_dir("/proc/self/task")
            .expect("/proc/self/task")
            .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
            .map(|s| s.trim().to_string())
            .collect()
    }

    #[test]
    fn installing_the_recorder_starts_its_upkeep_once() {
        let first = install().expect("the first recorder of this process");
        let again = install().expect("the same recorder");
        metrics::histogram!("test_seconds").record(0.5);
        // A new thread names itself once it runs.
        let upkeeps = || {
            thread_names()
                .iter()
                .filter(|n| n.as_str() == UPKEEP_THREAD)
                .count()
        };
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while upkeeps() == 0 && std::time::Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(upkeeps(), 1, "threads: {:?}", thread_names());
        // Both handles render the same registry.
        assert!(first.render().contains("test_seconds"));
        assert_eq!(first.render(), again.render());
    }
}
