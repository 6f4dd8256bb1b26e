//! Fixture for the keeper tests: a dev chain, a fresh database, the REAL indexer following
//! the chain into it, and the `keeper` binary run as a separate process.

#![allow(dead_code)] // each test binary uses a different subset

use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use alloy::primitives::{Address, B256, U256};
use alloy::providers::Provider;
use alloy::rpc::types::Filter;
use chainsub_abi::{ContractEvent, EndReason};
use chainsub_tests::chain::{DEV_KEYS, accounts};
use chainsub_tests::{ChildGuard, DevChain, Reserved, TestDb};

/// 9.99 USDC in base units.
pub(crate) const PRICE: u64 = 9_990_000;
pub(crate) const DAY: u64 = 86_400;

/// Chain + database + indexer.
pub(crate) struct Stack {
    pub chain: DevChain,
    pub db: TestDb,
    pub pg: tokio_postgres::Client,
    indexer: Option<ChildGuard>,
}

/// One lifecycle log of a subscription, reduced to what the keeper tests assert on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Step {
    Charged { period: u32, attempt: u8 },
    Failed { period: u32, attempt: u8 },
    Ended(EndReason),
}

impl Stack {
    /// A fresh chain and database with the indexer running against them.
    pub(crate) async fn start() -> Self {
        let chain = DevChain::start().await;
        let db = TestDb::create().await;
        let pg = db.connect().await;
        let mut stack = Self {
            chain,
            db,
            pg,
            indexer: None,
        };
        stack.start_indexer();
        stack
    }

    fn start_indexer(&mut self) {
        let child = Command::new(chainsub_tests::bin_path("indexer"))
            .envs(self.common_env())
            .env("START_BLOCK", self.chain.deploy_block.to_string())
            .env("CONFIRMATIONS", "0")
            .env("INDEXER_METRICS_LISTEN", "127.0.0.1:0")
            .env("INDEXER_POLL_INTERVAL_MS", "50")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn indexer");
        self.indexer = Some(ChildGuard(child));
    }

    fn common_env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("DATABASE_URL", self.db.url.clone()),
            ("RPC_URL", self.chain.anvil.url.clone()),
            ("CHAIN_ID", self.chain.anvil.chain_id.to_string()),
            ("CONTRACT_ADDRESS", self.chain.manager.to_string()),
        ]
    }

    /// Waits until the indexer has committed the chain's latest block.
    pub(crate) async fn sync_index(&self) {
        let head = self.chain.provider.get_block_number().await.unwrap() as i64;
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let row = self
                .pg
                .query_opt(
                    "SELECT block_number FROM indexer_cursor WHERE chain_id = $1",
                    &[&(self.chain.anvil.chain_id as i64)],
                )
                .await
                .unwrap();
            if row.is_some_and(|r| r.get::<_, i64>(0) >= head) {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "indexer did not reach block {head}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// A plan of `MERCHANT` at [`PRICE`], provisioned as the API does (its plan row names
    /// the on-chain reference), so the keeper charges it; returns its on-chain id.
    pub(crate) async fn create_plan(&self) -> u64 {
        self.create_plan_on_chain(accounts::MERCHANT).await.0
    }

    /// A plan created on the contract by `merchant` (a dev account) with no API plan row:
    /// the keeper is not responsible for it. Returns (on-chain id, reference).
    pub(crate) async fn create_plan_on_chain(&self, merchant: usize) -> (u64, B256) {
        let wallet = DevChain::address(merchant);
        let plan_ref = unique_ref();
        send_as!(
            wallet,
            self.chain
                .manager()
                .createPlan(wallet, U256::from(PRICE), plan_ref)
        );
        let id = self
            .chain
            .manager()
            .planCount()
            .call()
            .await
            .unwrap()
            .to::<u64>();
        if merchant == accounts::MERCHANT {
            self.register_plan(wallet, plan_ref).await;
        }
        (id, plan_ref)
    }

    /// The API's rows for `wallet`'s plan with `plan_ref` (what provisioning writes).
    pub(crate) async fn register_plan(&self, wallet: Address, plan_ref: B256) {
        chainsub_tests::db::register_plan(&self.pg, wallet, plan_ref, PRICE).await;
    }

    /// Funds dev account `customer` for `paid_periods` more periods, raises its allowance by
    /// as much and subscribes to `plan`; returns the subscription id. With `paid_periods` = 1
    /// (and no other funds) every renewal fails for lack of allowance.
    pub(crate) async fn subscribe(&self, customer: usize, plan: u64, paid_periods: u64) -> u64 {
        let who = DevChain::address(customer);
        self.chain.mint(who, PRICE * paid_periods).await;
        // approve() overwrites: add to what earlier subscriptions of this customer left.
        let left = self
            .chain
            .usdc()
            .allowance(who, self.chain.manager)
            .call()
            .await
            .unwrap();
        send_as!(
            who,
            self.chain
                .usdc()
                .approve(self.chain.manager, left + U256::from(PRICE * paid_periods))
        );
        let (merchant, amount) = self.chain.plan_terms(U256::from(plan)).await;
        send_as!(
            who,
            self.chain
                .manager()
                .subscribe(U256::from(plan), merchant, amount, unique_ref())
        );
        self.chain
            .manager()
            .subscriptionCount()
            .call()
            .await
            .unwrap()
            .to::<u64>()
    }

    /// One plan and a subscription of each of `customers` (three periods paid), a month
    /// later, indexed: every renewal is due. Returns the subscription ids.
    pub(crate) async fn due_renewals(&self, customers: &[usize]) -> Vec<u64> {
        let plan = self.create_plan().await;
        let mut subs = Vec::new();
        for &c in customers {
            subs.push(self.subscribe(c, plan, 3).await);
        }
        self.chain.increase_time(32 * DAY).await;
        self.sync_index().await;
        subs
    }

    /// The keeper binary with this stack's configuration and a fast poll interval (its
    /// health/metrics endpoint on a port nobody asks for).
    pub(crate) fn keeper(&self) -> Command {
        let mut cmd = self.keeper_command();
        cmd.env("KEEPER_METRICS_LISTEN", "127.0.0.1:0");
        cmd
    }

    /// The keeper binary with its health/metrics endpoint on `socket`.
    pub(crate) fn keeper_on(&self, socket: &Reserved) -> Command {
        let mut cmd = self.keeper_command();
        cmd.env("KEEPER_METRICS_LISTEN", "stdin")
            .stdin(socket.stdin());
        cmd
    }

    fn keeper_command(&self) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_keeper"));
        // Only what the test sets: a stray KEEPER_* in the developer's shell cannot leak in.
        cmd.env_clear()
            .envs(self.common_env())
            .env("KEEPER_PRIVATE_KEY", DEV_KEYS[accounts::KEEPER])
            .env("KEEPER_POLL_INTERVAL_MS", "100")
            // Test chains are a few dozen blocks long: a shallow re-check depth (the tests'
            // reorgs are 1 block deep) lets the watchdog see every settled step, so each
            // `keeper_pass` also asserts that nothing is stranded (exit 4).
            .env("KEEPER_REORG_DEPTH", "2")
            .env("RUST_LOG", "info")
            .stdout(if std::env::var_os("KEEPER_TEST_LOGS").is_some() {
                // Set KEEPER_TEST_LOGS=1 to see the keeper's logs while debugging a test.
                Stdio::inherit()
            } else {
                Stdio::null()
            });
        cmd
    }

    /// Runs `keeper --once` (plus `extra` flags) to completion.
    pub(crate) fn keeper_once(&self, extra: &[&str]) -> ExitStatus {
        let mut child = self
            .keeper()
            .arg("--once")
            .args(extra)
            .spawn()
            .expect("spawn keeper");
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status;
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                panic!("keeper --once did not finish");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Runs `keeper --once` and expects success.
    pub(crate) fn keeper_pass(&self) {
        let status = self.keeper_once(&[]);
        assert!(status.success(), "keeper --once failed: {status}");
    }

    /// Every lifecycle step the chain recorded for `sub` after its creation, in log order.
    pub(crate) async fn steps(&self, sub: u64) -> Vec<Step> {
        let logs = self
            .chain
            .provider
            .get_logs(&Filter::new().address(self.chain.manager).from_block(0))
            .await
            .unwrap();
        let mut out = Vec::new();
        for log in logs {
            let Ok(ev) = ContractEvent::decode(&log.inner) else {
                continue;
            };
            if ev.subscription_id() != Some(U256::from(sub)) {
                continue;
            }
            match ev {
                ContractEvent::SubscriptionCharged(e) if e.period > 1 => out.push(Step::Charged {
                    period: e.period,
                    attempt: e.attempt,
                }),
                ContractEvent::PaymentFailed(e) => out.push(Step::Failed {
                    period: e.period,
                    attempt: e.attempt,
                }),
                ContractEvent::SubscriptionEnded(e) => out.push(Step::Ended(
                    EndReason::from_u8(e.reason).expect("end reason"),
                )),
                _ => {}
            }
        }
        out
    }

    /// Transactions the keeper account has had mined (its nonce).
    pub(crate) async fn keeper_tx_count(&self) -> u64 {
        self.chain
            .provider
            .get_transaction_count(keeper_address())
            .latest()
            .await
            .unwrap()
    }

    /// Transactions the keeper journaled (signed), replacements included.
    pub(crate) async fn journaled_tx_count(&self) -> i64 {
        self.pg
            .query_one("SELECT count(*) FROM keeper_txs", &[])
            .await
            .unwrap()
            .get(0)
    }

    /// The index's status of `sub`.
    pub(crate) async fn indexed_status(&self, sub: u64) -> String {
        self.pg
            .query_one(
                "SELECT status FROM subscriptions WHERE chain_id = $1 AND onchain_id = $2",
                &[&(self.chain.anvil.chain_id as i64), &(sub as i64)],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Journal rows of `sub`: (period, attempt, status).
    pub(crate) async fn journal(&self, sub: u64) -> Vec<(i32, i32, String)> {
        self.pg
            .query(
                "SELECT period, attempt, status FROM keeper_steps WHERE subscription_id = $1
                 ORDER BY id",
                &[&(sub as i64)],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| (r.get(0), r.get(1), r.get(2)))
            .collect()
    }

    /// Turns anvil's automine on or off (off: transactions wait in the pool).
    pub(crate) async fn automine(&self, on: bool) {
        let _: serde_json::Value = self
            .chain
            .provider
            .raw_request("evm_setAutomine".into(), (on,))
            .await
            .unwrap();
    }

    /// Every subscription in `subs` was charged period 2 exactly once, at the first attempt.
    pub(crate) async fn assert_each_charged_once(&self, subs: &[u64]) {
        for sub in subs {
            assert_eq!(
                self.steps(*sub).await,
                vec![Step::Charged {
                    period: 2,
                    attempt: 1
                }],
                "sub {sub}"
            );
        }
    }

    /// Sessions of this test's database holding the advisory lock `key`; with `terminate`,
    /// ends them (and counts them).
    pub(crate) async fn lock_sessions(&self, key: i64, terminate: bool) -> i64 {
        let select = if terminate {
            "count(pg_terminate_backend(l.pid))"
        } else {
            "count(*)"
        };
        // Advisory locks are per database and every test's keeper takes the same key (one
        // chain id): only this test's database counts.
        self.pg
            .query_one(
                &format!(
                    "SELECT {select} FROM pg_locks l
                     JOIN pg_database d ON d.oid = l.database AND d.datname = current_database()
                     WHERE l.locktype = 'advisory' AND l.granted
                       AND ((l.classid::BIGINT << 32) | l.objid::BIGINT) = $1"
                ),
                &[&key],
            )
            .await
            .unwrap()
            .get(0)
    }

    /// Polls `sql` (one BIGINT column) until it returns at least `want`.
    pub(crate) async fn wait_count(&self, sql: &str, want: i64) {
        let what = format!("{sql} >= {want}");
        chainsub_tests::wait_until(&what, || async {
            let n: i64 = self.pg.query_one(sql, &[]).await.unwrap().get(0);
            n >= want
        })
        .await
    }
}

/// A fresh stack with one subscription of `CUSTOMER` to a new plan (`paid_periods` paid for),
/// a month later and indexed: its renewal is due. Returns the stack and the subscription.
pub(crate) async fn due_subscription(paid_periods: u64) -> (Stack, u64) {
    let stack = Stack::start().await;
    let plan = stack.create_plan().await;
    let sub = stack
        .subscribe(accounts::CUSTOMER, plan, paid_periods)
        .await;
    stack.chain.increase_time(32 * DAY).await;
    stack.sync_index().await;
    (stack, sub)
}

/// Starts a long-running keeper (plus `extra` flags); killed (SIGKILL) when dropped.
pub(crate) fn spawn(mut cmd: Command, extra: &[&str]) -> ChildGuard {
    ChildGuard(cmd.args(extra).spawn().expect("spawn keeper"))
}

/// Waits for a child to exit on its own.
pub(crate) fn wait_exit(child: &mut ChildGuard) -> ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(status) = child.0.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "process did not exit");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `GET http://127.0.0.1:{port}{path}`: (status code, body). Retries while the port is closed.
pub(crate) fn http_get(port: u16, path: &str) -> (u16, String) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        if let Some(answer) = chainsub_tests::http_get(port, path) {
            return answer;
        }
        assert!(
            Instant::now() < deadline,
            "nothing listening on port {port}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// Polls `/health` until `pred` holds for its JSON body.
pub(crate) fn wait_health(
    port: u16,
    pred: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let (_, body) = http_get(port, "/health");
        if let Ok(v) = serde_json::from_str::<serde_json::Value>(&body)
            && pred(&v)
        {
            return v;
        }
        assert!(
            Instant::now() < deadline,
            "health never matched; last: {body}"
        );
        std::thread::sleep(Duration::from_millis(25));
    }
}

/// A bytes32 reference never used before in this process.
pub(crate) fn unique_ref() -> B256 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    alloy::primitives::keccak256(format!("keeper-test-{}-{n}", std::process::id()))
}

/// The keeper's address (dev account 1).
pub(crate) fn keeper_address() -> Address {
    DevChain::address(accounts::KEEPER)
}
