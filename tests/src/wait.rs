//! The one way tests wait for something another process does: poll, bounded. The bound
//! only ever fires when something is stuck (a healthy run is far inside it), so it is
//! generous and never a timing assertion.

use std::future::Future;
use std::time::Duration;

/// How long any wait may take before the test fails as stuck.
pub const PATIENCE: Duration = Duration::from_secs(90);

/// How often a wait polls.
const EVERY: Duration = Duration::from_millis(20);

/// Polls `check` until it yields `Some`, and returns that; panics naming `what` after
/// [`PATIENCE`].
pub async fn wait_for_some<T, F, Fut>(what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Option<T>>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        if let Some(v) = check().await {
            return v;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "stuck: waited {PATIENCE:?} for {what}"
        );
        tokio::time::sleep(EVERY).await;
    }
}

/// Polls `cond` until it holds; panics naming `what` after [`PATIENCE`].
pub async fn wait_until<F, Fut>(what: &str, mut cond: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    wait_for_some(what, || {
        let fut = cond();
        async move { fut.await.then_some(()) }
    })
    .await
}
