//! `scripts/cluster up` as an operator runs it — a Postgres primary and a hot standby, two API
//! replicas behind HAProxy, two `api dispatch`, indexer and keeper each with a stand-by — and a
//! fault rehearsal under a steady mixed load (reads, plan creation, checkouts, renewals,
//! webhooks): one API replica, the writing indexer, the active keeper and one dispatcher are
//! killed with SIGKILL and the standby Postgres is restarted, with nothing promoted by hand.
//! Afterwards no webhook is lost or out of order within a subscription, every renewal is
//! charged exactly once, `indexer verify` finds the index equal to what the chain says, and
//! the only requests that failed were in flight on the killed replica. Build the binaries
//! first (scripts/test does).

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, BufReader};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use alloy::providers::Provider;
use chainsub_tests::chain::accounts::{MERCHANT, MERCHANT_B};
use chainsub_tests::chain::{dev_key, signing_provider};
use chainsub_tests::merchant::{ApiClient, wait_for};
use chainsub_tests::pg_cluster::PgServer;
use chainsub_tests::receiver::WebhookReceiver;
use chainsub_tests::{ChildGuard, DevChain, bin_path, scratch_dir};
use serde_json::{Value, json};

/// Customers (dev accounts the cluster's deploy funds with test USDC).
const CUSTOMERS: [usize; 4] = [4, 5, 6, 7];
/// The per-key limit the cluster runs with (per second, burst). The merchant's one key carries
/// the steady load (~13 requests a second) and the checks' polling (up to 10 a second) at
/// once: the limit, shared by both replicas, must hold both through a long wait, or the load's
/// requests turn into 429s; still low enough for the hammered key to pass it within a second.
const KEY_LIMIT: (u32, u32) = (50, 100);

/// One fault of the rehearsal.
#[derive(Debug, Clone, Copy)]
enum Fault {
    /// SIGKILL to API replica 1 or 2.
    KillApi(u8),
    /// SIGKILL to whichever indexer writes.
    KillWritingIndexer,
    /// SIGKILL to whichever keeper holds the lock.
    KillActiveKeeper,
    /// SIGKILL to dispatcher 1 or 2.
    KillDispatcher(u8),
    /// The standby Postgres stopped (immediate) and started again.
    RestartStandby,
}

/// The rehearsal's rounds: each applies its faults, then moves the chain a month on and waits
/// for every renewal. Without `CLUSTER_FAULT_SEED`, the four rounds CI runs (each fault
/// once); with it, `CLUSTER_FAULT_ROUNDS` (default 12) rounds of one or two faults drawn from
/// the seed (`scripts/fault-rehearsal`).
fn rounds() -> Vec<Vec<Fault>> {
    use Fault::*;
    let Some(seed) = std::env::var("CLUSTER_FAULT_SEED")
        .ok()
        .map(|s| s.parse::<u64>().expect("CLUSTER_FAULT_SEED: a number"))
    else {
        return vec![
            vec![KillApi(1)],
            vec![KillWritingIndexer],
            vec![KillActiveKeeper, KillDispatcher(1)],
            vec![RestartStandby],
        ];
    };
    let n: usize = std::env::var("CLUSTER_FAULT_ROUNDS")
        .map_or(12, |s| s.parse().expect("CLUSTER_FAULT_ROUNDS: a number"));
    // xorshift64*: the same seed, the same rehearsal.
    let mut x = seed.max(1);
    let mut next = move |m: u64| {
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d) % m
    };
    let all = [
        KillApi(1),
        KillApi(2),
        KillWritingIndexer,
        KillActiveKeeper,
        KillDispatcher(1),
        KillDispatcher(2),
        RestartStandby,
    ];
    (0..n)
        .map(|_| {
            (0..1 + next(2))
                .map(|_| all[next(all.len() as u64) as usize])
                .collect()
        })
        .collect()
}

/// A cluster started by `chainsub-dev cluster up` on free ports; stopped with SIGTERM (as
/// `scripts/cluster down` does) when dropped, so that its Postgres servers stop too.
struct Cluster {
    child: Option<ChildGuard>,
    dir: PathBuf,
    api: String,
    rpc: String,
    env: Vec<(String, String)>,
}

impl Cluster {
    /// The cluster for `renewals` renewal cycles: its checkouts approve every payment they
    /// need (the first, one per cycle, and a spare), and the load's plan creations stay within
    /// the relayer's per-merchant quota however long the rehearsal runs.
    fn start(renewals: usize) -> Self {
        let dir = scratch_dir("chainsub-cluster");
        let d = dir.to_str().unwrap().to_string();
        let mut child = Command::new(bin_path("chainsub-dev"))
            .args(["--dev-dir", &d, "cluster", "up", "--no-demo"])
            .args(["--listen", "127.0.0.1:0", "--stats-listen", "127.0.0.1:0"])
            .args([
                "--anvil-port",
                "0",
                "--primary-port",
                "0",
                "--standby-port",
                "0",
            ])
            .args(["--set", &format!("RATE_LIMIT_KEY_PER_SEC={}", KEY_LIMIT.0)])
            .args(["--set", &format!("RATE_LIMIT_KEY_BURST={}", KEY_LIMIT.1)])
            .args([
                "--set",
                &format!("CHECKOUT_ALLOWANCE_PERIODS={}", renewals + 2),
            ])
            .args(["--set", "RELAYER_SENDS_PER_MERCHANT_PER_DAY=100000"])
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .expect("start chainsub-dev cluster up");
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                println!("cluster: {line}");
                let _ = tx.send(line);
            }
        });
        let guard = ChildGuard(child);
        let mut printed = String::new();
        let deadline = Instant::now() + Duration::from_secs(240);
        while !printed.contains("stops it") {
            let left = deadline.saturating_duration_since(Instant::now());
            match rx.recv_timeout(left) {
                Ok(line) => printed.push_str(&(line + "\n")),
                Err(_) => panic!("the cluster did not come up:\n{printed}"),
            }
        }
        // The output's own lines, as an operator reads them.
        let after = |label: &str| {
            printed
                .lines()
                .find_map(|l| l.trim_start().strip_prefix(label))
                .map(|rest| rest.split_whitespace().next().unwrap().to_string())
                .unwrap_or_else(|| panic!("no `{label}` line in:\n{printed}"))
        };
        let api = after("API").trim_end_matches("/api/v1/health").to_string();
        let rpc = after("chain");
        let env = std::fs::read_to_string(dir.join("stack.env"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with('#'))
            .filter_map(|l| l.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Self {
            child: Some(guard),
            dir,
            api,
            rpc,
            env,
        }
    }

    fn var(&self, name: &str) -> &str {
        &self.env.iter().find(|(k, _)| k == name).unwrap().1
    }

    /// Each process the cluster lists: name, pid and health URL.
    fn processes(&self) -> Vec<(String, u32, String)> {
        std::fs::read_to_string(self.dir.join("processes"))
            .unwrap()
            .lines()
            .map(|l| {
                let p: Vec<&str> = l.split_whitespace().collect();
                (p[0].to_string(), p[1].parse().unwrap(), p[2].to_string())
            })
            .collect()
    }

    /// The one of `names` whose health says `field` is true (the writer, the lock holder).
    async fn active(&self, names: [&str; 2], field: &str) -> String {
        let http = reqwest::Client::new();
        for (name, _, health) in self.processes() {
            if !names.contains(&name.as_str()) {
                continue;
            }
            if let Ok(r) = http.get(&health).send().await
                && let Ok(body) = r.json::<Value>().await
                && body[field] == true
            {
                return name;
            }
        }
        panic!("none of {names:?} reports {field}");
    }

    /// Waits until every process listed runs and its health answers (a stand-by's too), and
    /// the balancer has had a health check of each since.
    async fn wait_all_up(&self) {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_secs(2))
            .build()
            .unwrap();
        wait_for("every process up", 120, || async {
            for (_, pid, health) in self.processes() {
                let alive = std::path::Path::new(&format!("/proc/{pid}")).exists();
                let answers = http
                    .get(&health)
                    .send()
                    .await
                    .is_ok_and(|r| r.status().as_u16() == 200);
                if !(alive && answers) {
                    return Ok(None);
                }
            }
            Ok(Some(()))
        })
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }

    fn kill9(&self, name: &str) {
        let (_, pid, _) = self
            .processes()
            .into_iter()
            .find(|(n, _, _)| n == name)
            .unwrap();
        let ok = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -9 {name} ({pid})");
        println!("killed {name} (pid {pid}) with SIGKILL");
    }

    /// The standby Postgres the cluster made.
    fn standby(&self) -> PgServer {
        let url = url::Url::parse(self.var("READ_DATABASE_URL")).unwrap();
        PgServer {
            data: self.dir.join("pg/standby"),
            port: url.port().unwrap(),
        }
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if let Some(mut child) = self.child.take() {
            child.terminate(60);
        }
    }
}

/// What the load saw: each failed request with when it started and ended.
#[derive(Default)]
struct Seen {
    ok: u64,
    failed: Vec<(String, Instant, Instant)>,
}

/// Reads (subscriptions, events), checkout links and plan creations through the balancer
/// until `stop`, each at its own steady pace, well under the key's limit.
fn load(
    api: &ApiClient,
    key: &str,
    plan: &str,
    stop: &Arc<AtomicBool>,
) -> (Arc<Mutex<Seen>>, Vec<tokio::task::JoinHandle<()>>) {
    let seen = Arc::new(Mutex::new(Seen::default()));
    let mut tasks = Vec::new();
    // About 13 requests a second in all, under the key's limit of 20.
    for (i, every) in [(0, 200), (1, 200), (2, 500), (3, 1500)] {
        let (api, key, plan, stop, seen) = (
            api.clone(),
            key.to_string(),
            plan.to_string(),
            stop.clone(),
            seen.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                n += 1;
                let started = Instant::now();
                let (what, res) = match i {
                    0 => ("GET /subscriptions", api.get_res("/api/v1/subscriptions", &key).await),
                    1 => ("GET /events", api.get_res("/api/v1/events", &key).await),
                    2 => (
                        "POST /checkouts",
                        api.post_res("/api/v1/checkouts", &key, &json!({"planId": plan, "customerExternalId": format!("load-{n}")}), None).await,
                    ),
                    _ => (
                        "POST /plans",
                        api.post_res(
                            "/api/v1/plans",
                            &key,
                            &json!({"name": format!("Load plan {n}"), "amount": "1.00", "currency": "USDC", "interval": "month"}),
                            Some(&format!("load-plan-{n}")),
                        )
                        .await,
                    ),
                };
                let good = matches!(&res, Ok(r) if r.status < 300);
                let failure = (!good).then(|| {
                    let status = res.map_or_else(|e| e.to_string(), |r| r.status.to_string());
                    (format!("{what}: {status}"), started, Instant::now())
                });
                {
                    let mut s = seen.lock().unwrap();
                    match failure {
                        None => s.ok += 1,
                        Some(f) => s.failed.push(f),
                    }
                }
                tokio::time::sleep(Duration::from_millis(every)).await;
            }
        }));
    }
    (seen, tasks)
}

async fn subscription(api: &ApiClient, key: &str, id: &str) -> Value {
    api.get_ok(&format!("/api/v1/subscriptions/{id}"), key)
        .await
        .unwrap()
}

/// The periods charged, in ledger order.
fn charged_periods(s: &Value) -> Vec<i64> {
    s["ledger"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "charge")
        .map(|e| e["period"].as_i64().unwrap())
        .collect()
}

/// Index reads the API replicas served from the standby (`api_index_reads_total`).
async fn replica_reads(cluster: &Cluster) -> u64 {
    let mut total = 0;
    for line in std::fs::read_to_string(cluster.dir.join("processes"))
        .unwrap()
        .lines()
    {
        let Some(addr) = line
            .split_whitespace()
            .find_map(|w| w.strip_prefix("metrics="))
        else {
            continue;
        };
        let text = reqwest::get(format!("http://{addr}/metrics"))
            .await
            .unwrap()
            .text()
            .await
            .unwrap();
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("api_index_reads_total{source=\"replica\"} "))
            .map_or(0, |v| v.trim().parse::<u64>().unwrap());
    }
    total
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cluster_rides_out_killed_processes_and_a_restarted_replica_under_load() {
    let rounds = rounds();
    let cluster = Cluster::start(rounds.len());
    let api = ApiClient::new(&cluster.api);
    let chain = signing_provider(&cluster.rpc);
    let receiver = WebhookReceiver::start("127.0.0.1:0".parse().unwrap())
        .await
        .unwrap();
    let session = api.sign_in(&dev_key(MERCHANT)).await.unwrap();
    let key = api.create_key(&session).await.unwrap();
    let secret = api.set_webhook(&session, &receiver.url()).await.unwrap();
    receiver.set_secret(&secret);
    let plan = api.create_plan(&key, "Cluster Pro", "5.00").await.unwrap();
    let plan_id = plan["id"].as_str().unwrap().to_string();

    let stop = Arc::new(AtomicBool::new(false));
    let (seen, tasks) = load(&api, &key, &plan_id, &stop);

    // The customers subscribe through checkout links served by the balancer.
    let mut subs = Vec::new();
    for (i, c) in CUSTOMERS.into_iter().enumerate() {
        let customer = format!("cluster-{i}");
        let link = api
            .create_checkout(&key, &plan_id, &customer)
            .await
            .unwrap();
        api.subscribe_via_checkout(link["url"].as_str().unwrap(), &chain, DevChain::address(c))
            .await
            .unwrap();
        let id = wait_for("the subscription indexed", 90, || async {
            let list = api
                .get_ok(
                    &format!("/api/v1/subscriptions?customerExternalId={customer}"),
                    &key,
                )
                .await?;
            Ok(list["data"][0]["id"].as_str().map(str::to_string))
        })
        .await
        .unwrap();
        subs.push(id);
    }

    // One key's limit holds across both replicas behind the balancer: another merchant's key
    // hammered through HAProxy gets at most its rate plus one burst more than one replica
    // alone would give.
    let other = api.sign_in(&dev_key(MERCHANT_B)).await.unwrap();
    let other_key = api.create_key(&other).await.unwrap();
    let started = Instant::now();
    let run = Duration::from_secs(3);
    let hammers: Vec<_> = (0..4)
        .map(|_| {
            let (api, key) = (api.clone(), other_key.clone());
            tokio::spawn(async move {
                let (mut ok, mut limited) = (0u32, 0u32);
                while started.elapsed() < run {
                    match api.get_res("/api/v1/plans", &key).await.unwrap().status {
                        200 => ok += 1,
                        429 => limited += 1,
                        s => panic!("status {s}"),
                    }
                }
                (ok, limited)
            })
        })
        .collect();
    let (mut accepted, mut limited) = (0, 0);
    for h in hammers {
        let (ok, no) = h.await.unwrap();
        accepted += ok;
        limited += no;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let bound = (f64::from(KEY_LIMIT.1) * 2.0 + f64::from(KEY_LIMIT.0) * elapsed).ceil() as u32;
    println!(
        "one key through the balancer: {accepted} accepted, {limited} refused in {elapsed:.2} s (bound {bound})"
    );
    assert!(
        limited > 0 && accepted <= bound,
        "{accepted} accepted over {bound}"
    );

    // Renewals, each round with its faults.
    let renewals = rounds.len() as i64;
    let mut api_killed_at = Vec::new();
    for (i, faults) in rounds.iter().enumerate() {
        let cycle = i as i64 + 1;
        cluster.wait_all_up().await;
        println!("round {cycle}: {faults:?}");
        for fault in faults {
            match *fault {
                Fault::KillApi(n) => {
                    cluster.kill9(&format!("api-{n}"));
                    api_killed_at.push(Instant::now());
                }
                Fault::KillWritingIndexer => {
                    cluster.kill9(&cluster.active(["indexer-1", "indexer-2"], "writer").await)
                }
                Fault::KillActiveKeeper => {
                    cluster.kill9(&cluster.active(["keeper-1", "keeper-2"], "lockHeld").await)
                }
                Fault::KillDispatcher(n) => cluster.kill9(&format!("dispatch-{n}")),
                Fault::RestartStandby => {
                    let standby = cluster.standby();
                    standby.kill();
                    println!("stopped the standby Postgres");
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    standby.restart();
                    println!("started the standby Postgres again");
                }
            }
        }
        let _: Value = chain
            .raw_request("evm_increaseTime".into(), (32 * 86_400u64,))
            .await
            .unwrap();
        let _: Value = chain
            .raw_request("anvil_mine".into(), ("0x1",))
            .await
            .unwrap();
        for id in &subs {
            wait_for(&format!("renewal {cycle} of {id}"), 120, || async {
                let s = subscription(&api, &key, id).await;
                Ok((charged_periods(&s).len() as i64 > cycle).then_some(()))
            })
            .await
            .unwrap();
        }
    }
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await.unwrap();
    }

    // Every renewal charged exactly once: periods 1..=RENEWALS+1, each once.
    for id in &subs {
        let s = subscription(&api, &key, id).await;
        assert_eq!(
            charged_periods(&s),
            (1..=renewals + 1).collect::<Vec<_>>(),
            "{id}: {s}"
        );
    }

    // The index at the head, equal to what the chain says.
    let head = chain.get_block_number().await.unwrap();
    api.wait_indexed_to(head, 90).await.unwrap();
    let (code, text) = chainsub_tests::services::run_indexer(
        &[
            "verify",
            "--from",
            cluster.var("START_BLOCK"),
            "--to",
            &head.to_string(),
        ],
        &cluster.env,
    );
    assert_eq!(code, 0, "indexer verify:\n{text}");

    // Every event listed arrived as a signed webhook, each subscription's in chain order.
    let events = api.all_events(&key, head).await.unwrap();
    let listed: HashSet<String> = events
        .iter()
        .map(|e| e["id"].as_str().unwrap().to_string())
        .collect();
    receiver
        .wait_until("every event delivered", |d| {
            let got: HashSet<&str> = d.iter().map(|d| d.id.as_str()).collect();
            listed.iter().all(|id| got.contains(id.as_str()))
        })
        .await;
    let deliveries = receiver.received();
    assert!(
        deliveries.iter().all(|d| d.verified),
        "every delivery signed"
    );
    let mut first_seen = Vec::new();
    let mut ids = HashSet::new();
    for d in &deliveries {
        assert!(
            listed.contains(&d.id),
            "a delivery of an event the API does not list: {}",
            d.id
        );
        if ids.insert(d.id.clone()) {
            first_seen.push(d.id.clone());
        }
    }
    let position: BTreeMap<&str, (u64, u64)> = events
        .iter()
        .map(|e| {
            let c = &e["chain"];
            (
                e["id"].as_str().unwrap(),
                (
                    c["blockNumber"].as_u64().unwrap_or(0),
                    c["logIndex"].as_u64().unwrap_or(0),
                ),
            )
        })
        .collect();
    let subscription_of: BTreeMap<&str, &str> = events
        .iter()
        .filter_map(|e| Some((e["id"].as_str()?, e["data"]["subscriptionId"].as_str()?)))
        .collect();
    for sub in &subs {
        let order: Vec<(u64, u64)> = first_seen
            .iter()
            .filter(|id| subscription_of.get(id.as_str()) == Some(&sub.as_str()))
            .map(|id| position[id.as_str()])
            .collect();
        let mut sorted = order.clone();
        sorted.sort();
        assert_eq!(order, sorted, "{sub}: webhooks out of chain order");
        assert!(
            order.len() >= 2 + renewals as usize,
            "{sub}: created and every charge delivered: {order:?}"
        );
    }

    // Only requests in flight on the killed API replica failed.
    {
        let seen = seen.lock().unwrap();
        println!(
            "load: {} requests answered, {} failed: {:?}",
            seen.ok,
            seen.failed.len(),
            seen.failed.iter().map(|(w, _, _)| w).collect::<Vec<_>>()
        );
        for (what, started, ended) in &seen.failed {
            assert!(
                api_killed_at.iter().any(|k| started <= k && ended >= k),
                "{what} failed and was not in flight when an API replica was killed"
            );
        }
        assert!(seen.ok > 100, "the load ran: {} answered", seen.ok);
    }
    let from_standby = replica_reads(&cluster).await;
    println!("index reads served from the standby: {from_standby}");
    assert!(
        from_standby > 0,
        "the API replicas read the index from the standby"
    );
}
