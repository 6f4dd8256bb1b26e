//! The pages' static files, compiled into the binary (no CDN, nothing to deploy beside it).

/// `(name, content type, bytes)` of every file served under `/assets/`.
const FILES: &[(&str, &str, &str)] = &[
    (
        "style.css",
        "text/css; charset=utf-8",
        include_str!("../../assets/style.css"),
    ),
    (
        "checkout.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/checkout.js"),
    ),
    (
        "wallet.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/wallet.js"),
    ),
    (
        "account.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/account.js"),
    ),
    (
        "plan_change.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/plan_change.js"),
    ),
    (
        "dashboard.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/dashboard.js"),
    ),
    (
        "subscription.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/subscription.js"),
    ),
    (
        "overview.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/overview.js"),
    ),
    (
        "plans.js",
        "text/javascript; charset=utf-8",
        include_str!("../../assets/plans.js"),
    ),
];

/// The file called `name`, with its content type.
pub fn get(name: &str) -> Option<(&'static str, &'static str)> {
    FILES
        .iter()
        .find(|(n, _, _)| *n == name)
        .map(|(_, ct, body)| (*ct, *body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn known_assets_are_served_and_paths_are_not() {
        assert!(get("wallet.js").is_some_and(
            |(ct, b)| ct.starts_with("text/javascript") && b.contains("window.ethereum")
        ));
        assert!(get("checkout.js").is_some_and(|(_, b)| b.contains("ChainsubWallet")));
        assert!(get("style.css").is_some());
        assert!(get("../Cargo.toml").is_none());
    }
}
