//! `scripts/cluster up | down | status`: the whole service as a cluster on this machine, every
//! part a real process: a Postgres primary and a hot-standby streaming replica
//! (`pg_basebackup`, each on its own port), anvil with the contracts, two API replicas behind
//! HAProxy (health checks on `GET /api/v1/health`), two `api dispatch`, and `indexer` and
//! `keeper` each with a stand-by. The API replicas read the index from the replica
//! (`READ_DATABASE_URL`) and share each key's rate budget on the primary.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, anyhow, bail};
use chainsub_tests::Reserved;
use chainsub_tests::merchant::ApiClient;
use chainsub_tests::pg_cluster::ReplicatedPg;
use chainsub_tests::services::service_command;
use clap::Args;

use crate::stack::{Stack, StackEnv};
use crate::{chain, db, demo, services};

/// Where the processes' names, pids and health addresses are listed for `status`.
const PROCESSES_FILE: &str = "processes";

#[derive(Debug, Args)]
pub(crate) struct ClusterArgs {
    /// HAProxy's frontend: the one address clients use.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: String,
    /// HAProxy's statistics page.
    #[arg(long, default_value = "127.0.0.1:8404")]
    stats_listen: String,
    /// Port for anvil (0: any free port).
    #[arg(long, default_value_t = 8545)]
    anvil_port: u16,
    /// The Postgres primary's port (0: any free port).
    #[arg(long, default_value_t = 5433)]
    primary_port: u16,
    /// The hot standby's port (0: any free port).
    #[arg(long, default_value_t = 5434)]
    standby_port: u16,
    /// Start the cluster but skip the demo.
    #[arg(long)]
    no_demo: bool,
    /// The demo's webhook receiver's listen address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    webhook_receiver_listen: std::net::SocketAddr,
}

/// One process of the cluster: its name, binary, arguments, the setting its socket (handed
/// over as stdin) is named by, and the path its health answers on.
struct Role {
    name: &'static str,
    bin: &'static str,
    args: &'static [&'static str],
    listen_var: &'static str,
    health: &'static str,
}

const ROLES: [Role; 8] = [
    Role {
        name: "indexer-1",
        bin: "indexer",
        args: &[],
        listen_var: "INDEXER_METRICS_LISTEN",
        health: "/health",
    },
    Role {
        name: "indexer-2",
        bin: "indexer",
        args: &[],
        listen_var: "INDEXER_METRICS_LISTEN",
        health: "/health",
    },
    Role {
        name: "keeper-1",
        bin: "keeper",
        args: &[],
        listen_var: "KEEPER_METRICS_LISTEN",
        health: "/health",
    },
    Role {
        name: "keeper-2",
        bin: "keeper",
        args: &[],
        listen_var: "KEEPER_METRICS_LISTEN",
        health: "/health",
    },
    Role {
        name: "dispatch-1",
        bin: "api",
        args: &["dispatch"],
        listen_var: "DISPATCH_METRICS_LISTEN",
        health: "/metrics",
    },
    Role {
        name: "dispatch-2",
        bin: "api",
        args: &["dispatch"],
        listen_var: "DISPATCH_METRICS_LISTEN",
        health: "/metrics",
    },
    Role {
        name: "api-1",
        bin: "api",
        args: &["serve"],
        listen_var: "API_LISTEN",
        health: "/api/v1/health",
    },
    Role {
        name: "api-2",
        bin: "api",
        args: &["serve"],
        listen_var: "API_LISTEN",
        health: "/api/v1/health",
    },
];

/// Brings the cluster up, runs the demo through the balancer and holds it until Ctrl-C or
/// `scripts/cluster down`. A process that dies is reported and left dead (its stand-by or
/// the other replica carries on): a fault rehearsal kills them on purpose.
pub(crate) async fn up(args: ClusterArgs, dir: PathBuf) -> Result<()> {
    std::fs::create_dir_all(&dir).with_context(|| format!("create {}", dir.display()))?;
    if let Some(pid) = crate::stack::running_pid(&dir) {
        bail!("a cluster is already up (pid {pid}); run `scripts/cluster down` first");
    }
    which("haproxy", "scripts/apt-packages haproxy")?;
    let mut stack = Stack::new(dir.clone());
    println!("starting Postgres: a primary and a hot standby (pg_basebackup)");
    let pg = {
        let root = dir.join("pg");
        let (p, s) = (args.primary_port, args.standby_port);
        tokio::task::spawn_blocking(move || ReplicatedPg::start_in(root, p, s)).await?
    };
    println!(
        "postgres primary on {}, standby on {}",
        pg.primary.port, pg.standby.port
    );
    let booted = boot(&args, &dir, &mut stack, &pg).await;
    let summary = match booted {
        Ok(s) => s,
        Err(e) => {
            stack.shutdown();
            return Err(e);
        }
    };
    stack.write_pid()?;
    println!("{}", summary.text);
    println!("Ctrl-C (or `scripts/cluster down`) stops it");
    let outcome = stack.hold(false).await;
    stack.shutdown();
    drop(pg);
    println!("stopped postgres primary and standby");
    outcome
}

struct Summary {
    text: String,
    _demo: Option<demo::DemoOutcome>,
}

async fn boot(
    args: &ClusterArgs,
    dir: &Path,
    stack: &mut Stack,
    pg: &ReplicatedPg,
) -> Result<Summary> {
    crate::ensure_npm_tools()?;
    let rpc_url = chain::start_anvil(stack, args.anvil_port)?;
    chain::wait_for_rpc(&rpc_url, stack).await?;
    let deployed = chain::deploy(&rpc_url, 10_000).await?;
    println!(
        "deployed on chain {}: SubscriptionManager {} (block {})",
        deployed.chain_id, deployed.manager, deployed.deploy_block
    );
    let database_url = pg.primary.url("chainsub");
    db::prepare(&database_url, true).await?;
    let replica_url = pg.standby.url("chainsub");

    let frontend = Reserved::bind(&args.listen)
        .with_context(|| format!("--listen {} is taken", args.listen))?;
    let base = frontend.url();
    let mut env = StackEnv::dev(
        &database_url,
        &rpc_url,
        &deployed,
        0,
        &frontend.addr.to_string(),
    );
    for (k, v) in services::DEV_EXTRAS {
        env.push(k, v.to_string());
    }
    env.push("READ_DATABASE_URL", replica_url.clone());
    // Webhooks go out from the two `api dispatch` processes only.
    env.push("NO_DISPATCHER", "true".into());
    // HAProxy writes the client's address in X-Forwarded-For.
    env.push("TRUSTED_PROXIES", "127.0.0.1/32".into());
    let env_file = env.write(dir)?;

    let mut listed = String::new();
    let mut apis = Vec::new();
    for role in &ROLES {
        let socket = Reserved::new();
        let mut vars: Vec<(String, String)> = env
            .vars()
            .filter(|(k, _)| *k != "API_LISTEN")
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        vars.push((role.listen_var.into(), "stdin".into()));
        let mut metrics = None;
        if role.bin == "api" && role.args == ["serve"] {
            let m = Reserved::new().port;
            vars.push(("API_METRICS_LISTEN".into(), format!("127.0.0.1:{m}")));
            metrics = Some(m);
            apis.push((role.name, socket.port));
        }
        let log = stack.log_file(role.name)?;
        let mut cmd = service_command(&services::bin(role.bin)?, role.args, &vars);
        cmd.stdin(socket.stdin())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        stack.spawn(role.name, cmd)?;
        let pid = stack.pid(role.name).unwrap_or(0);
        writeln!(
            listed,
            "{} {pid} http://{}{}{}",
            role.name,
            socket.addr,
            role.health,
            metrics
                .map(|m| format!(" metrics=127.0.0.1:{m}"))
                .unwrap_or_default()
        )?;
    }
    for (name, port) in &apis {
        wait_healthy(stack, name, &format!("http://127.0.0.1:{port}")).await?;
    }

    let stats = Reserved::bind(&args.stats_listen)
        .with_context(|| format!("--stats-listen {} is taken", args.stats_listen))?;
    let stats_addr = stats.addr.to_string();
    let config = haproxy_config(&frontend.addr.to_string(), &stats_addr, &apis);
    let config_path = dir.join("haproxy.cfg");
    std::fs::write(&config_path, config)?;
    drop((frontend, stats));
    let log = stack.log_file("haproxy")?;
    let mut cmd = Command::new("haproxy");
    cmd.args(["-db", "-f"])
        .arg(&config_path)
        .stdout(Stdio::from(log.try_clone()?))
        .stderr(Stdio::from(log));
    stack.spawn("haproxy", cmd)?;
    writeln!(
        listed,
        "haproxy {} {base}/api/v1/health",
        stack.pid("haproxy").unwrap_or(0)
    )?;
    std::fs::write(dir.join(PROCESSES_FILE), &listed)?;
    wait_healthy(stack, "haproxy", &base).await?;
    println!("haproxy answering at {base}");

    let demo = if args.no_demo {
        None
    } else {
        Some(
            demo::run(
                &base,
                &rpc_url,
                args.webhook_receiver_listen,
                &dir.join("api-key"),
            )
            .await?,
        )
    };
    let mut text = format!(
        "\ncluster is up:\n  API        {base}/api/v1/health  (HAProxy in front of api-1, api-2; stats http://{stats}/)\n  chain      {rpc_url}\n  postgres   primary {database_url}\n             standby {replica_url} (hot standby, streaming)\n  settings   {env}\n  processes  (name pid health)\n",
        stats = stats_addr,
        env = env_file.display()
    );
    for line in listed.lines() {
        let _ = writeln!(text, "    {line}");
    }
    let _ = write!(text, "  logs       {}/<name>.log", dir.display());
    if let Some(d) = &demo {
        let _ = write!(
            text,
            "\n  checkout   {}\n  webhooks   {} (demo receiver, still verifying)",
            d.checkout_url,
            d.receiver.url()
        );
    }
    Ok(Summary { text, _demo: demo })
}

/// HAProxy's configuration: one frontend, the API replicas round-robin with health checks on
/// the API's readiness (`/api/v1/health` answers 503 while its database is unreachable),
/// a connection refused retried on the other replica.
fn haproxy_config(frontend: &str, stats: &str, apis: &[(&str, u16)]) -> String {
    let mut servers = String::new();
    for (name, port) in apis {
        let _ = writeln!(servers, "    server {name} 127.0.0.1:{port} check");
    }
    format!(
        "global\n    maxconn 4096\n    log stdout format raw local0\n\n\
         defaults\n    mode http\n    log global\n    option httplog\n    timeout connect 2s\n    timeout client 75s\n    timeout server 60s\n    timeout http-keep-alive 75s\n    option redispatch\n    retries 3\n    retry-on conn-failure\n\n\
         frontend api\n    bind {frontend}\n    option forwardfor\n    default_backend apis\n\n\
         backend apis\n    balance roundrobin\n    option httpchk GET /api/v1/health\n    http-check expect status 200\n    default-server inter 1s fall 2 rise 1\n{servers}\n\
         listen stats\n    bind {stats}\n    stats enable\n    stats uri /\n"
    )
}

async fn wait_healthy(stack: &mut Stack, name: &str, base: &str) -> Result<()> {
    let api = ApiClient::new(base);
    let deadline = Instant::now() + Duration::from_secs(60);
    while !api.healthy().await {
        if let Some(dead) = stack.exited() {
            bail!(
                "{dead} exited during start-up; see {}/{dead}.log",
                stack.dir().display()
            );
        }
        if Instant::now() > deadline {
            bail!(
                "{name} at {base} did not answer within 60 s; see {}/{name}.log",
                stack.dir().display()
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    Ok(())
}

fn which(program: &str, install: &str) -> Result<()> {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {program}")])
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if found {
        Ok(())
    } else {
        Err(anyhow!("{program} is not installed: run `{install}`"))
    }
}

/// Up or down, and each process: alive or not, and what its health answers.
pub(crate) async fn status(dir: &Path) -> Result<()> {
    let Some(pid) = crate::stack::running_pid(dir) else {
        println!("down");
        return Ok(());
    };
    println!("up (pid {pid})");
    let listed = std::fs::read_to_string(dir.join(PROCESSES_FILE)).unwrap_or_default();
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .build()?;
    for line in listed.lines() {
        let mut parts = line.split_whitespace();
        let (Some(name), Some(pid), Some(health)) = (parts.next(), parts.next(), parts.next())
        else {
            continue;
        };
        let alive = Path::new(&format!("/proc/{pid}")).exists();
        // The status code, and the role a stand-by reports (`"status": "standby"`).
        let answer = match http.get(health).send().await {
            Ok(r) => {
                let code = r.status().as_u16();
                let role = r
                    .json::<serde_json::Value>()
                    .await
                    .ok()
                    .and_then(|b| b["status"].as_str().map(str::to_string));
                role.map_or_else(|| code.to_string(), |role| format!("{code} {role}"))
            }
            Err(_) => "no answer".into(),
        };
        println!(
            "  {name:<11} pid {pid:<7} {}  {health} -> {answer}",
            if alive { "running" } else { "exited " }
        );
    }
    Ok(())
}
