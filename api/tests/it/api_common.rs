// Shared by the REST API tests: an in-process server on a free port with a fresh database
// (and, when asked, a fresh anvil with the contracts and the operator as relayer), SIWE
// sign-in with a local alloy signer, index rows shaped exactly like the indexer's, and a
// TCP proxy that can cut a dependency off and restore it.

use alloy::primitives::{Address, B256};
use alloy::signers::Signer;
use alloy::signers::local::PrivateKeySigner;
use chainsub_api::auth::siwe::SiweMessage;
use chainsub_api::config::Config;
use chainsub_api::server::Running;
use chainsub_tests::merchant::ApiClient;
use chainsub_tests::{DevChain, TestDb};
use clap::Parser;
use serde_json::{Value, json};
use tokio_postgres::Client;

pub(crate) const CHAIN_ID: i64 = 31337;
pub(crate) const SECRET: &str = "test-checkout-secret";

#[derive(Parser)]
struct Wrap {
    #[command(flatten)]
    cfg: Config,
}

/// Knobs a test may turn.
#[derive(Clone)]
pub(crate) struct Opts {
    pub chain: bool,
    pub key_per_sec: u32,
    pub key_burst: u32,
    pub ip_per_sec: u32,
    pub ip_burst: u32,
    /// Replaces the database URL the server uses (e.g. a proxy in front of the test DB).
    pub database_url: Option<String>,
    /// Replaces the RPC URL the relayer uses.
    pub rpc_url: Option<String>,
    pub provision_timeout_ms: u64,
    /// DATABASE_POOL_SIZE (default: the server's).
    pub pool_size: Option<usize>,
    /// TRUSTED_PROXIES (comma-separated CIDRs).
    pub trusted_proxies: Option<String>,
    /// Serve `/metrics` on its own listener (API_METRICS_LISTEN=127.0.0.1:0).
    pub metrics: bool,
    /// CONFIRMATIONS (default: the server's).
    pub confirmations: Option<u64>,
    /// Any other flags (`--name value` pairs, as on the command line).
    pub args: Vec<String>,
}

impl Default for Opts {
    fn default() -> Self {
        Self {
            chain: false,
            key_per_sec: 1000,
            key_burst: 1000,
            ip_per_sec: 1000,
            ip_burst: 1000,
            database_url: None,
            rpc_url: None,
            provision_timeout_ms: 20_000,
            pool_size: None,
            trusted_proxies: None,
            metrics: false,
            confirmations: None,
            args: Vec::new(),
        }
    }
}

/// A running API with its database (and chain).
pub(crate) struct App {
    pub running: Running,
    pub base: String,
    /// The kit's API client, pointed at this server.
    pub api: ApiClient,
    /// Its HTTP client, for requests built by hand.
    pub http: reqwest::Client,
    pub chain: Option<DevChain>,
    pub db: TestDb,
}

pub(crate) async fn spawn(opts: Opts) -> App {
    let db = TestDb::create().await;
    let chain = if opts.chain {
        Some(DevChain::start().await)
    } else {
        None
    };
    spawn_with(db, chain, opts).await
}

pub(crate) async fn spawn_with(db: TestDb, chain: Option<DevChain>, opts: Opts) -> App {
    let running = start_server(&db.url, chain.as_ref(), &opts).await;
    let base = format!("http://{}", running.addr);
    let api = ApiClient::new(&base);
    App {
        http: api.http().clone(),
        api,
        base,
        running,
        chain,
        db,
    }
}

/// Another API process (in this test process) over `app`'s database and chain, e.g. a
/// second replica sharing the relayer key.
pub(crate) async fn spawn_replica(app: &App, opts: Opts) -> (Running, ApiClient) {
    let running = start_server(&app.db.url, app.chain.as_ref(), &opts).await;
    let client = ApiClient::new(&format!("http://{}", running.addr));
    (running, client)
}

async fn start_server(db_url: &str, chain: Option<&DevChain>, opts: &Opts) -> Running {
    // Bound first, so the base URL (the SIWE domain, checkout links) names a port that is
    // already ours.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    let port = listener.local_addr().expect("local_addr").port();
    let base = format!("http://127.0.0.1:{port}");
    let (contract, usdc) = chain.map_or(
        (Address::repeat_byte(0xcc), Address::repeat_byte(0xdd)),
        |c| (c.manager, c.usdc),
    );
    let mut args: Vec<String> = vec![
        "api".into(),
        "--database-url".into(),
        opts.database_url
            .clone()
            .unwrap_or_else(|| db_url.to_string()),
        "--base-url".into(),
        base.clone(),
        "--chain-id".into(),
        CHAIN_ID.to_string(),
        "--contract-address".into(),
        contract.to_string(),
        "--usdc-address".into(),
        usdc.to_string(),
        "--checkout-signing-secret".into(),
        SECRET.into(),
        "--webhook-secrets-keys".into(),
        chainsub_tests::TEST_WEBHOOK_SECRETS_KEYS.into(),
        "--no-dispatcher".into(),
        "--rate-limit-key-per-sec".into(),
        opts.key_per_sec.to_string(),
        "--rate-limit-key-burst".into(),
        opts.key_burst.to_string(),
        "--rate-limit-ip-per-sec".into(),
        opts.ip_per_sec.to_string(),
        "--rate-limit-ip-burst".into(),
        opts.ip_burst.to_string(),
        "--provision-timeout-ms".into(),
        opts.provision_timeout_ms.to_string(),
        // Local receivers (the dashboard tests set http://127.0.0.1 URLs).
        "--webhook-allow-http".into(),
        "--webhook-allow-loopback".into(),
    ];
    if opts.metrics {
        args.push("--metrics-listen".into());
        args.push("127.0.0.1:0".into());
    }
    if let Some(t) = &opts.trusted_proxies {
        args.push("--trusted-proxies".into());
        args.push(t.clone());
    }
    args.extend(opts.args.iter().cloned());
    if let Some(n) = opts.confirmations {
        args.push("--confirmations".into());
        args.push(n.to_string());
    }
    if let Some(n) = opts.pool_size {
        args.push("--database-pool-size".into());
        args.push(n.to_string());
    }
    if let Some(c) = chain {
        args.push("--rpc-url".into());
        args.push(opts.rpc_url.clone().unwrap_or_else(|| c.anvil.url.clone()));
        args.push("--relayer-private-key".into());
        args.push(chainsub_tests::chain::DEV_KEYS[0].into());
    }
    let cfg = Wrap::parse_from(args).cfg;
    // In-process servers run requests on the test's runtime unless `--shards N` is given.
    let shards = cfg.shards.unwrap_or(0);
    chainsub_api::server::start_sharded(cfg, listener, shards)
        .await
        .expect("api starts")
}

/// A response read whole (the kit's).
pub(crate) use chainsub_tests::merchant::Res;

/// Reads a whole response (the kit's reader; panics on a broken connection).
pub(crate) async fn read(r: reqwest::Response) -> Res {
    chainsub_tests::merchant::read(r)
        .await
        .expect("read response")
}

impl App {
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }

    pub(crate) async fn get(&self, path: &str, key: &str) -> Res {
        self.api.get_res(path, key).await.expect("GET")
    }

    pub(crate) async fn post(
        &self,
        path: &str,
        key: &str,
        body: &Value,
        idem: Option<&str>,
    ) -> Res {
        self.api
            .post_res(path, key, body, idem)
            .await
            .expect("POST")
    }

    /// The text of `/metrics` (the server was spawned with `Opts { metrics: true, .. }`).
    pub(crate) async fn metrics(&self) -> String {
        let addr = self.running.metrics_addr.expect("a metrics listener");
        self.http
            .get(format!("http://{addr}/metrics"))
            .send()
            .await
            .unwrap()
            .text()
            .await
            .unwrap()
    }

    /// `GET /health` on the metrics listener: the operator's health, with the database and
    /// the relayer's funds.
    pub(crate) async fn operator_health(&self) -> Res {
        let addr = self.running.metrics_addr.expect("a metrics listener");
        read(
            self.http
                .get(format!("http://{addr}/health"))
                .send()
                .await
                .unwrap(),
        )
        .await
    }

    /// `POST /api/v1/plans`: a 9.99 USDC monthly plan named `name`.
    pub(crate) async fn monthly_plan(&self, key: &str, name: &str) -> Res {
        self.post(
            "/api/v1/plans",
            key,
            &json!({"name": name, "amount": "9.99", "currency": "USDC", "interval": "month"}),
            None,
        )
        .await
    }

    /// `POST /api/v1/plans/{id}/provision` (retry provisioning).
    pub(crate) async fn provision(&self, id: &str, key: &str) -> Res {
        self.post(
            &format!("/api/v1/plans/{id}/provision"),
            key,
            &json!({}),
            None,
        )
        .await
    }

    pub(crate) async fn db(&self) -> Client {
        self.db.connect().await
    }

    /// A merchant for dev account `i` with a fresh API key (through the operator command's
    /// library function).
    pub(crate) async fn merchant_key(&self, wallet: Address) -> String {
        let mut client = self.db().await;
        let (_, key) = chainsub_api::auth::api_key::admin_create_key(&mut client, wallet)
            .await
            .unwrap();
        key.expose().to_string()
    }

    /// A SIWE message for this server, with the given nonce.
    pub(crate) fn siwe(&self, address: Address, nonce: &str) -> SiweMessage {
        let now = chrono::Utc::now();
        SiweMessage {
            domain: self.base.trim_start_matches("http://").to_string(),
            address,
            statement: Some("Sign in to the Chainsub dashboard".into()),
            uri: self.base.clone(),
            version: "1".into(),
            chain_id: CHAIN_ID as u64,
            nonce: nonce.into(),
            issued_at: now,
            expiration_time: Some(now + chrono::Duration::minutes(5)),
            not_before: None,
            request_id: None,
            resources: vec![],
        }
    }

    pub(crate) async fn nonce(&self) -> String {
        let r = self
            .api
            .send(
                self.api
                    .request(reqwest::Method::POST, "/api/v1/auth/nonce"),
            )
            .await
            .expect("POST /auth/nonce");
        assert_eq!(r.status, 201, "{:?}", r.body);
        r.body["nonce"].as_str().unwrap().to_string()
    }

    /// Posts a signed SIWE message.
    pub(crate) async fn verify(&self, text: &str, signature: &str) -> Res {
        self.api
            .send(
                self.api
                    .request(reqwest::Method::POST, "/api/v1/auth/session")
                    .json(&json!({ "message": text, "signature": signature })),
            )
            .await
            .expect("POST /auth/session")
    }

    /// Full sign-in with a local signer.
    pub(crate) async fn sign_in(&self, signer: &PrivateKeySigner) -> Session {
        let nonce = self.nonce().await;
        let text = self.siwe(signer.address(), &nonce).to_text();
        let sig = sign(signer, &text).await;
        let r = self.verify(&text, &sig).await;
        assert_eq!(r.status, 200, "{:?}", r.body);
        let set_cookie = r.header("set-cookie").expect("set-cookie");
        assert!(set_cookie.contains("HttpOnly") && set_cookie.contains("SameSite=Strict"));
        let cookie = set_cookie.split(';').next().unwrap().to_string();
        Session {
            cookie,
            csrf: r.body["csrfToken"].as_str().unwrap().to_string(),
            body: r.body,
        }
    }

    /// A session-authenticated request.
    pub(crate) async fn session_req(
        &self,
        method: reqwest::Method,
        path: &str,
        s: &Session,
        csrf: bool,
    ) -> Res {
        self.api
            .session_res(method, path, s, csrf, None)
            .await
            .expect("session request")
    }
}

/// Spawns the `indexer` binary for this app's chain and database (CONFIRMATIONS as given).
pub(crate) fn spawn_indexer(app: &App, confirmations: u64) -> chainsub_tests::ChildGuard {
    let chain = app.chain.as_ref().expect("an app with a chain");
    spawn_indexer_on(chain, &app.db, confirmations)
}

/// The `indexer` binary on `chain` into `db` with `confirmations`; its metrics on a port of
/// its own (tests run side by side).
pub(crate) fn spawn_indexer_on(
    chain: &DevChain,
    db: &TestDb,
    confirmations: u64,
) -> chainsub_tests::ChildGuard {
    chainsub_tests::ChildGuard(
        std::process::Command::new(chainsub_tests::bin_path("indexer"))
            .env("DATABASE_URL", &db.url)
            .env("RPC_URL", &chain.anvil.url)
            .env("CHAIN_ID", chain.anvil.chain_id.to_string())
            .env("CONTRACT_ADDRESS", chain.manager.to_string())
            .env("START_BLOCK", chain.deploy_block.to_string())
            .env("CONFIRMATIONS", confirmations.to_string())
            .env("INDEXER_POLL_INTERVAL_MS", "20")
            .env("INDEXER_NO_FINALIZED_TAG", "true")
            .env("INDEXER_METRICS_LISTEN", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .spawn()
            .expect("spawn indexer"),
    )
}

/// A dashboard session (the kit's, shared with the end-to-end tests).
pub(crate) use chainsub_tests::merchant::Session;

/// EIP-191 personal_sign as a 0x hex string.
pub(crate) async fn sign(signer: &PrivateKeySigner, text: &str) -> String {
    let sig = signer.sign_message(text.as_bytes()).await.unwrap();
    format!("0x{}", alloy::hex::encode(sig.as_bytes()))
}

// ------------------------------------------------------------------ index rows

/// What the indexer writes for one log.
pub(crate) struct SeedEvent<'a> {
    pub name: &'a str,
    pub kind: Option<&'a str>,
    pub merchant: Address,
    pub subscription_id: Option<i64>,
    pub plan_id: Option<i64>,
    pub block_number: i64,
    pub log_index: i32,
    pub block_time: chrono::DateTime<chrono::Utc>,
    /// The log's fields by their Solidity names (uints as decimal strings), as the indexer
    /// used to store them: [`insert_event`] writes the `log_*` columns from it.
    pub decoded: Value,
    pub snapshot: Option<Value>,
}

pub(crate) const CONTRACT: [u8; 20] = [0xcc; 20];

/// The snapshot columns of an event row (migration 0025), for seeds that copy them.
pub(crate) const SNAP_COLUMNS: &str = "snap_id, snap_status, snap_cancel_at_period_end, snap_period, \
    snap_period_start, snap_period_end, snap_next_payment_at, snap_failed_attempts, \
    snap_subscriber, snap_customer_external_id, snap_amount, snap_plan_onchain_id";

/// The values of [`SNAP_COLUMNS`] from a snapshot given as JSON (the API's shape) in
/// parameter `$n`, as the migration that typed them reads them.
pub(crate) fn snap_from_json(n: usize) -> String {
    format!(
        "${n}::jsonb->>'id', ${n}::jsonb->>'status', (${n}::jsonb->>'cancelAtPeriodEnd')::boolean, \
         (${n}::jsonb->>'period')::int, (${n}::jsonb->>'currentPeriodStart')::timestamptz, \
         (${n}::jsonb->>'currentPeriodEnd')::timestamptz, \
         (${n}::jsonb->>'nextPaymentAt')::timestamptz, (${n}::jsonb->>'failedAttempts')::smallint, \
         decode(substr(${n}::jsonb->>'subscriber', 3), 'hex'), ${n}::jsonb->>'customerExternalId', \
         (${n}::jsonb->>'amount')::numeric, (${n}::jsonb->>'planOnchainId')::bigint"
    )
}

/// Inserts a chain_events row; returns (id, public_id).
pub(crate) async fn insert_event(c: &Client, e: SeedEvent<'_>) -> (i64, String) {
    let tx = seed_tx_hash(e.block_number, e.log_index);
    let block_hash = alloy::primitives::keccak256(format!("block-{}", e.block_number).as_bytes());
    let public_id = chainsub_abi::ids::event_id(CHAIN_ID as u64, tx, e.log_index as u64);
    let topics: Vec<Vec<u8>> = vec![vec![0u8; 32]];
    let row = c
        .query_one(
            &format!(
                "INSERT INTO chain_events (public_id, chain_id, contract, block_number, \
                 block_hash, block_time, transaction_hash, transaction_index, log_index, name, \
                 kind, merchant_wallet, subscription_id, plan_id, topics, data, log_amount, \
                 log_subscriber, log_period, log_attempt, log_reason, log_next_retry_at, \
                 {SNAP_COLUMNS}, sequence) \
                 VALUES ($1, $2, $3, $4, $5, $6, $7, 0, $8, $9, $10, $11, $12, $13, $14, $15, \
                 ($16::jsonb->>'amount')::numeric, \
                 decode(substr($16::jsonb->>'subscriber', 3), 'hex'), \
                 ($16::jsonb->>'period')::bigint, ($16::jsonb->>'attempt')::int, \
                 ($16::jsonb->>'reason')::int, ($16::jsonb->>'nextRetryAt')::numeric, {}, \
                 CASE WHEN $12::bigint IS NOT NULL THEN (SELECT count(*) + 1 FROM chain_events x \
                  WHERE x.chain_id = $2 AND x.subscription_id = $12::bigint) END) \
                 RETURNING id",
                snap_from_json(17)
            ),
            &[
                &public_id,
                &CHAIN_ID,
                &CONTRACT.as_slice(),
                &e.block_number,
                &block_hash.as_slice(),
                &e.block_time,
                &tx.as_slice(),
                &e.log_index,
                &e.name,
                &e.kind,
                &e.merchant.as_slice(),
                &e.subscription_id,
                &e.plan_id,
                &topics,
                &Vec::<u8>::new(),
                &e.decoded,
                &e.snapshot,
            ],
        )
        .await
        .unwrap();
    (row.get(0), public_id)
}

/// A PlanCreated log and its chain_plans row.
pub(crate) async fn seed_chain_plan(
    c: &Client,
    merchant: Address,
    onchain_id: i64,
    plan_ref: &[u8],
    block: i64,
) {
    let (event_id, _) = insert_event(
        c,
        SeedEvent {
            name: "PlanCreated",
            kind: None,
            merchant,
            subscription_id: None,
            plan_id: Some(onchain_id),
            block_number: block,
            log_index: 0,
            block_time: chrono::Utc::now(),
            decoded: json!({"planId": onchain_id.to_string(), "merchant": merchant.to_string(),
                "planRef": format!("0x{}", alloy::hex::encode(plan_ref)), "amount": "9990000",
                "createdBy": merchant.to_string()}),
            snapshot: None,
        },
    )
    .await;
    c.execute(
        "INSERT INTO chain_plans (chain_id, onchain_id, merchant_wallet, plan_ref, amount, created_by, event_id) \
         VALUES ($1, $2, $3, $4, 9990000, $3, $5)",
        &[&CHAIN_ID, &onchain_id, &merchant.as_slice(), &plan_ref, &event_id],
    )
    .await
    .unwrap();
}

/// The transaction hash [`insert_event`] gives the log at (`block_number`, `log_index`).
pub(crate) fn seed_tx_hash(block_number: i64, log_index: i32) -> B256 {
    B256::from(alloy::primitives::keccak256(
        format!("tx-{block_number}-{log_index}").as_bytes(),
    ))
}

/// The public id of the subscription [`seed_subscription`] seeds as on-chain `onchain_id`
/// (what the indexer derives from its creating transaction).
pub(crate) fn sub_id(onchain_id: i64) -> String {
    chainsub_core::SubscriptionId::of_creation(
        CHAIN_ID as u64,
        seed_tx_hash(100 + onchain_id, 0),
        onchain_id as u64,
    )
    .to_string()
}

/// A subscription as the indexer leaves it after subscribe(): SubscriptionCreated +
/// SubscriptionCharged(period 1) events, the subscriptions row and one ledger entry.
/// Block number = 100 + onchain_id (so ids and blocks order alike).
pub(crate) async fn seed_subscription(
    c: &Client,
    merchant: Address,
    onchain_id: i64,
    plan_onchain_id: i64,
    customer: Option<&str>,
) -> (String, String) {
    let block = 100 + onchain_id;
    let start = chrono::DateTime::from_timestamp(1_700_000_000 + onchain_id * 60, 0).unwrap();
    let end = chrono::DateTime::from_timestamp(
        chainsub_abi::add_months(start.timestamp() as u64, 1).unwrap() as i64,
        0,
    )
    .unwrap();
    let subscriber = Address::repeat_byte(0x44);
    let sub_id = sub_id(onchain_id);
    let snapshot = json!({
        "id": sub_id, "status": "active", "cancelAtPeriodEnd": false, "period": 1,
        "currentPeriodStart": start.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "currentPeriodEnd": end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "nextPaymentAt": end.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
        "failedAttempts": 0, "subscriber": subscriber.to_string(),
        "customerExternalId": customer, "amount": "9990000", "planOnchainId": plan_onchain_id,
    });
    let (created_id, created_pub) = insert_event(
        c,
        SeedEvent {
            name: "SubscriptionCreated",
            kind: Some("subscription.created"),
            merchant,
            subscription_id: Some(onchain_id),
            plan_id: Some(plan_onchain_id),
            block_number: block,
            log_index: 0,
            block_time: start,
            decoded: json!({"subscriptionId": onchain_id.to_string(), "merchant": merchant.to_string(),
                "subscriber": subscriber.to_string(), "planId": plan_onchain_id.to_string(),
                "customerRef": format!("0x{}", "00".repeat(32)), "amount": "9990000",
                "periodStart": start.timestamp().to_string(), "periodEnd": end.timestamp().to_string()}),
            snapshot: Some(snapshot.clone()),
        },
    )
    .await;
    let (charged_id, _) = insert_event(
        c,
        SeedEvent {
            name: "SubscriptionCharged",
            kind: Some("subscription.charged"),
            merchant,
            subscription_id: Some(onchain_id),
            plan_id: Some(plan_onchain_id),
            block_number: block,
            log_index: 1,
            block_time: start,
            decoded: json!({"subscriptionId": onchain_id.to_string(), "merchant": merchant.to_string(),
                "subscriber": subscriber.to_string(), "planId": plan_onchain_id.to_string(),
                "amount": "9990000", "period": "1", "periodStart": start.timestamp().to_string(),
                "periodEnd": end.timestamp().to_string(), "attempt": "1"}),
            snapshot: Some(snapshot),
        },
    )
    .await;
    c.execute(
        "INSERT INTO subscriptions (chain_id, onchain_id, public_id, merchant_wallet, subscriber, \
         plan_onchain_id, amount, customer_ref, customer_external_id, status, period, \
         current_period_start, current_period_end, created_event_id, last_event_id, created_at, updated_at, \
         event_count) \
         VALUES ($1, $2, $3, $4, $5, $6, 9990000, $7, $8, 'active', 1, $9, $10, $11, $12, $9, $9, 2)",
        &[
            &CHAIN_ID,
            &onchain_id,
            &sub_id,
            &merchant.as_slice(),
            &subscriber.as_slice(),
            &plan_onchain_id,
            &vec![0u8; 32],
            &customer,
            &start,
            &end,
            &created_id,
            &charged_id,
        ],
    )
    .await
    .unwrap();
    c.execute(
        "INSERT INTO ledger_entries (event_id, chain_id, subscription_id, kind, amount, period, \
         period_start, period_end, attempt, block_time) \
         VALUES ($1, $2, $3, 'charge', 9990000, 1, $4, $5, 1, $4)",
        &[&charged_id, &CHAIN_ID, &onchain_id, &start, &end],
    )
    .await
    .unwrap();
    (sub_id, created_pub)
}

/// The indexer's cursor at `block`.
pub(crate) async fn seed_cursor(c: &Client, block: i64) {
    c.execute(
        "INSERT INTO indexer_cursor (chain_id, contract, block_number, block_hash, head_number) \
         VALUES ($1, $2, $3, $4, $3) ON CONFLICT (chain_id) DO UPDATE SET block_number = $3, head_number = $3",
        &[&CHAIN_ID, &CONTRACT.as_slice(), &block, &vec![0u8; 32]],
    )
    .await
    .unwrap();
}

pub(crate) use chainsub_tests::proxy::{Proxy, target_of, via};

/// The `api` binary over `db` and `chain` on `socket` (plus `extra` environment).
pub(crate) fn api_process(
    db: &TestDb,
    chain: &DevChain,
    socket: &chainsub_tests::Reserved,
    extra: &[(&str, &str)],
) -> chainsub_tests::ChildGuard {
    use chainsub_tests::services::{service_command, test_env};
    let mut env = test_env(chain, db, 0);
    env.push(("API_LISTEN".into(), "stdin".into()));
    env.push(("BASE_URL".into(), socket.url()));
    env.push(("NO_DISPATCHER".into(), "true".into()));
    for (k, v) in extra {
        env.push((k.to_string(), v.to_string()));
    }
    chainsub_tests::ChildGuard(
        service_command(&chainsub_tests::bin_path("api"), &[], &env)
            .stdin(socket.stdin())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("spawn api"),
    )
}
