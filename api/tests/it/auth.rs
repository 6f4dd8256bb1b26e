//! Dashboard sign-in (SIWE) and the API key lifecycle, against a real server and database.

use crate::api_common::{App, Opts, sign, spawn};
use chainsub_tests::chain::accounts::{MERCHANT, STRANGER};
use chainsub_tests::{DevChain, dev_key};
use reqwest::Method;

async fn app() -> App {
    spawn(Opts::default()).await
}

#[tokio::test]
async fn key_lifecycle_create_use_rotate_revoke() {
    let app = app().await;
    let signer = dev_key(MERCHANT);
    let s = app.sign_in(&signer).await;
    assert_eq!(
        s.body["merchant"]["wallet"],
        signer.address().to_checksum(None)
    );
    let code = s.body["merchant"]["code"].as_str().unwrap().to_string();
    assert!(code.len() == 8, "short merchant code: {code}");

    // No key yet.
    let st = app
        .session_req(Method::GET, "/api/v1/auth/keys", &s, false)
        .await;
    assert_eq!(st.status, 200);
    assert_eq!(st.body["active"], false);

    // Create: shown once, then usable.
    let created = app
        .session_req(Method::POST, "/api/v1/auth/keys", &s, true)
        .await;
    assert_eq!(created.status, 201, "{:?}", created.body);
    let key1 = created.body["key"].as_str().unwrap().to_string();
    assert!(key1.starts_with("sk_live_"));
    assert_eq!(created.body["rotated"], false);
    assert_eq!(app.get("/api/v1/plans", &key1).await.status, 200);

    let st = app
        .session_req(Method::GET, "/api/v1/auth/keys", &s, false)
        .await;
    assert_eq!(st.body["active"], true);
    assert_eq!(st.body["key"]["prefix"], "sk_live_");
    assert_eq!(st.body["key"]["last4"], &key1[key1.len() - 4..]);
    assert!(
        st.body["key"]["lastUsedAt"].is_string(),
        "use recorded: {:?}",
        st.body
    );
    assert!(
        st.body.to_string().find(&key1[8..]).is_none(),
        "status never shows the key"
    );

    // Only the hash is stored.
    let db = app.db().await;
    let stored: Vec<u8> = db
        .query_one(
            "SELECT key_hash FROM api_keys WHERE revoked_at IS NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, chainsub_api::auth::sha3(key1.as_bytes()).to_vec());

    // Rotate: the old key fails at once, the new one works.
    let rotated = app
        .session_req(Method::POST, "/api/v1/auth/keys", &s, true)
        .await;
    assert_eq!(rotated.status, 201);
    assert_eq!(rotated.body["rotated"], true);
    let key2 = rotated.body["key"].as_str().unwrap().to_string();
    assert_ne!(key1, key2);
    let old = app.get("/api/v1/plans", &key1).await;
    assert_eq!(old.status, 401);
    assert_eq!(old.error_code(), Some("invalid_api_key"));
    assert_eq!(app.get("/api/v1/plans", &key2).await.status, 200);

    // Revoke: no key works.
    let revoked = app
        .session_req(Method::DELETE, "/api/v1/auth/keys", &s, true)
        .await;
    assert_eq!(revoked.status, 200);
    assert_eq!(revoked.body["active"], false);
    assert_eq!(app.get("/api/v1/plans", &key2).await.status, 401);
    assert_eq!(app.get("/api/v1/plans", &key1).await.status, 401);
}

#[tokio::test]
async fn keys_need_a_session_and_state_changes_need_the_csrf_token() {
    let app = app().await;
    let anon = crate::api_common::read(
        app.http
            .get(app.url("/api/v1/auth/keys"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(anon.status, 401);
    assert_eq!(anon.error_code(), Some("session_required"));
    let s = app.sign_in(&dev_key(MERCHANT)).await;
    let no_csrf = app
        .session_req(Method::POST, "/api/v1/auth/keys", &s, false)
        .await;
    assert_eq!(no_csrf.status, 403);
    assert_eq!(no_csrf.error_code(), Some("csrf_token_invalid"));
    let no_csrf = app
        .session_req(Method::DELETE, "/api/v1/auth/keys", &s, false)
        .await;
    assert_eq!(no_csrf.status, 403);
    // An API key is not a session.
    let key = app.merchant_key(dev_key(MERCHANT).address()).await;
    assert_eq!(app.get("/api/v1/auth/keys", &key).await.status, 401);
}

#[tokio::test]
async fn logout_ends_the_session() {
    let app = app().await;
    let s = app.sign_in(&dev_key(MERCHANT)).await;
    assert_eq!(
        app.session_req(Method::GET, "/api/v1/auth/session", &s, false)
            .await
            .status,
        200
    );
    let out = app
        .session_req(Method::DELETE, "/api/v1/auth/session", &s, true)
        .await;
    assert_eq!(out.status, 200);
    assert!(out.header("set-cookie").unwrap().contains("Max-Age=0"));
    assert_eq!(
        app.session_req(Method::GET, "/api/v1/auth/keys", &s, false)
            .await
            .status,
        401
    );
}

#[tokio::test]
async fn first_sign_in_creates_the_merchant_once() {
    let app = app().await;
    let a = app.sign_in(&dev_key(MERCHANT)).await;
    let b = app.sign_in(&dev_key(MERCHANT)).await;
    assert_eq!(a.body["merchant"]["id"], b.body["merchant"]["id"]);
    assert_ne!(a.cookie, b.cookie);
    let n: i64 = app
        .db()
        .await
        .query_one("SELECT count(*) FROM merchants", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 1);
}

#[tokio::test]
async fn siwe_rejects_wrong_domain_replayed_nonce_expired_wrong_chain_and_bad_signature() {
    let app = app().await;
    let signer = dev_key(MERCHANT);

    // Wrong domain.
    let nonce = app.nonce().await;
    let mut m = app.siwe(signer.address(), &nonce);
    m.domain = "evil.example".into();
    let text = m.to_text();
    let r = app.verify(&text, &sign(&signer, &text).await).await;
    assert_eq!(r.status, 401, "wrong domain: {:?}", r.body);
    assert_eq!(r.error_code(), Some("siwe_rejected"));

    // Wrong URI origin.
    let mut m = app.siwe(signer.address(), &nonce);
    m.uri = "https://evil.example/login".into();
    let text = m.to_text();
    assert_eq!(
        app.verify(&text, &sign(&signer, &text).await).await.status,
        401
    );

    // Expired.
    let mut m = app.siwe(signer.address(), &nonce);
    m.issued_at = chrono::Utc::now() - chrono::Duration::minutes(3);
    m.expiration_time = Some(chrono::Utc::now() - chrono::Duration::minutes(1));
    let text = m.to_text();
    let r = app.verify(&text, &sign(&signer, &text).await).await;
    assert_eq!(r.status, 401, "expired: {:?}", r.body);

    // Not yet valid.
    let mut m = app.siwe(signer.address(), &nonce);
    m.not_before = Some(chrono::Utc::now() + chrono::Duration::minutes(10));
    let text = m.to_text();
    assert_eq!(
        app.verify(&text, &sign(&signer, &text).await).await.status,
        401
    );

    // Wrong chain id.
    let mut m = app.siwe(signer.address(), &nonce);
    m.chain_id = 1;
    let text = m.to_text();
    let r = app.verify(&text, &sign(&signer, &text).await).await;
    assert_eq!(r.status, 401, "wrong chain: {:?}", r.body);

    // Bad signature: signed by someone else, and a malformed one.
    let m = app.siwe(signer.address(), &nonce);
    let text = m.to_text();
    let r = app
        .verify(&text, &sign(&dev_key(STRANGER), &text).await)
        .await;
    assert_eq!(r.status, 401, "stranger's signature: {:?}", r.body);
    let r = app.verify(&text, "0x1234").await;
    assert_eq!(r.status, 400);
    assert_eq!(r.error_param(), Some("signature"));
    // A signature over different text.
    let other = text.replace("Sign in to", "Signing in to");
    let r = app.verify(&text, &sign(&signer, &other).await).await;
    assert_eq!(r.status, 401);

    // None of the rejections consumed the nonce; a good message now works once…
    let good = app.siwe(signer.address(), &nonce).to_text();
    let sig = sign(&signer, &good).await;
    assert_eq!(app.verify(&good, &sig).await.status, 200);
    // …and the same nonce is refused the second time.
    let r = app.verify(&good, &sig).await;
    assert_eq!(r.status, 401, "replayed nonce: {:?}", r.body);
    assert_eq!(r.error_code(), Some("siwe_nonce_invalid"));

    // A nonce the server never issued.
    let m = app.siwe(signer.address(), "neverissued123");
    let text = m.to_text();
    assert_eq!(
        app.verify(&text, &sign(&signer, &text).await).await.status,
        401
    );
}

#[tokio::test]
async fn admin_create_key_binary_prints_a_working_key() {
    let app = app().await;
    let bin = chainsub_tests::bin_path("api");
    assert!(
        bin.exists(),
        "build the api binary first: cargo build -p chainsub-api --bins"
    );
    let wallet = DevChain::address(MERCHANT);
    let out = std::process::Command::new(bin)
        .args(["admin", "create-key", "--wallet", &wallet.to_string()])
        .env("DATABASE_URL", &app.db.url)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let key = String::from_utf8(out.stdout).unwrap().trim().to_string();
    assert!(key.starts_with("sk_live_"));
    assert_eq!(app.get("/api/v1/plans", &key).await.status, 200);
}

/// An API server whose key lookups stay cached for an hour unless a change is heard, with
/// `/metrics` on its own listener, and a merchant's key.
async fn caching_app() -> (App, String) {
    let app = spawn(Opts {
        metrics: true,
        args: vec!["--api-key-cache-secs".into(), "3600".into()],
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(dev_key(MERCHANT).address()).await;
    (app, key)
}

/// The value of the metric line starting with `series` (0 when absent).
async fn metric(app: &App, series: &str) -> f64 {
    app.metrics()
        .await
        .lines()
        .find_map(|l| l.strip_prefix(series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

const HITS: &str = "api_key_cache_lookups_total{result=\"hit\"}";

/// The key cache's LISTEN session, once the server has one.
async fn key_listener(app: &App) -> i32 {
    let db = app.db().await;
    chainsub_tests::wait_for_some("the key cache's LISTEN session", || async {
        db.query_opt(
            // Its last statement: the LISTEN, or one of its probes since.
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() \
             AND (query = 'LISTEN chainsub_api_keys' \
                  OR query LIKE 'NOTIFY chainsub_api_keys, ''listen-probe:%')",
            &[],
        )
        .await
        .unwrap()
        .map(|r| r.get(0))
    })
    .await
}

/// A key used once is served from the cache (one round trip per request, not two)...
async fn cached(app: &App, key: &str) {
    key_listener(app).await;
    chainsub_tests::wait_until("the key cache to listen", || async {
        metric(app, "api_key_cache_listening").await == 1.0
    })
    .await;
    assert_eq!(app.get("/api/v1/plans", key).await.status, 200);
    let hits = metric(app, HITS).await;
    assert_eq!(app.get("/api/v1/plans", key).await.status, 200);
    assert_eq!(
        metric(app, HITS).await,
        hits + 1.0,
        "the second use is a hit"
    );
}

/// ...and a key revoked in the database by anyone (another API process, an operator's SQL)
/// stops working here when the change is heard, long before the entry would expire.
#[tokio::test]
async fn a_key_revoked_elsewhere_stops_working_when_the_change_is_heard() {
    let (app, key) = caching_app().await;
    cached(&app, &key).await;
    app.db()
        .await
        .execute("UPDATE api_keys SET revoked_at = now()", &[])
        .await
        .unwrap();
    chainsub_tests::wait_until("the revoked key to be refused", || async {
        app.get("/api/v1/plans", &key).await.status == 401
    })
    .await;
}

/// A revocation while the cache's LISTEN connection is down is never heard: everything
/// cached is dropped with the connection, so the key is refused once the server listens again.
#[tokio::test]
async fn a_key_revoked_while_the_listener_was_down_is_refused() {
    let (app, key) = caching_app().await;
    cached(&app, &key).await;
    let old = key_listener(&app).await;
    let db = app.db().await;
    db.execute("SELECT pg_terminate_backend($1)", &[&old])
        .await
        .unwrap();
    db.execute("UPDATE api_keys SET revoked_at = now()", &[])
        .await
        .unwrap();
    chainsub_tests::wait_until("a new LISTEN session", || async {
        key_listener(&app).await != old
    })
    .await;
    assert_eq!(app.get("/api/v1/plans", &key).await.status, 401);
}

/// Guessed keys past the per-IP limit cost no database lookup: once the caller's bucket has
/// refused a failed key attempt, further attempts are refused before their key is looked up,
/// until the wait it was told has passed. (Before, every guess was looked up and only then
/// refused.) Page traffic that empties the same bucket does not stop a valid key.
#[tokio::test]
async fn guessed_keys_past_the_ip_limit_are_refused_before_any_lookup() {
    let app = spawn(Opts {
        metrics: true,
        ip_per_sec: 1,
        ip_burst: 3,
        ..Opts::default()
    })
    .await;
    const UNKNOWN: &str = "api_key_lookups_total{result=\"unknown\"}";
    let before = metric(&app, UNKNOWN).await;
    let mut statuses = Vec::new();
    for i in 0..30u32 {
        // Well-formed, so only the database can tell they are unknown.
        let guess = format!("sk_live_{i:064x}");
        statuses.push(app.get("/api/v1/plans", &guess).await.status);
    }
    assert!(
        statuses.iter().all(|s| *s == 401 || *s == 429),
        "{statuses:?}"
    );
    // Every 401 was looked up, and so was the first refusal; a 429 right after another 429
    // is a refused caller that was not let through, so it was never looked up (a caller let
    // through finds the token its wait was for, and gets a 401).
    let looked_up_at_least = statuses.iter().filter(|s| **s == 401).count() + 1;
    let unseen = statuses.windows(2).filter(|w| w == &[429, 429]).count();
    assert!(
        unseen >= 5,
        "most guesses come after the burst: {statuses:?}"
    );
    chainsub_tests::wait_until("the lookups to be counted", || async {
        metric(&app, UNKNOWN).await - before >= looked_up_at_least as f64
    })
    .await;
    let looked_up = metric(&app, UNKNOWN).await - before;
    assert!(
        looked_up <= (statuses.len() - unseen) as f64,
        "{looked_up} lookups for {statuses:?}"
    );

    // Another caller's IP bucket emptied by page requests (not by key attempts): its valid
    // key, never seen by this process, is still looked up and served.
    let shop = spawn(Opts {
        ip_per_sec: 1,
        ip_burst: 2,
        ..Opts::default()
    })
    .await;
    let key = shop.merchant_key(dev_key(MERCHANT).address()).await;
    let mut pages = Vec::new();
    for _ in 0..4 {
        pages.push(shop.get("/checkout/nobody/nothing", "").await.status);
    }
    assert_eq!(pages.last(), Some(&429), "{pages:?}");
    assert_eq!(shop.get("/api/v1/plans", &key).await.status, 200);
}
