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
    /// Restart a process that died after this many seconds, as the systemd units do
    /// (`Restart=on-failure`, `RestartSec=2`), on the same address. 0: leave it dead.
    #[arg(long, default_value_t = 2)]
    restart_after_secs: u64,
    /// A setting for every process, `NAME=VALUE` (written to stack.env), e.g.
    /// `--set RATE_LIMIT_KEY_PER_SEC=20`; repeat for more.
    #[arg(long = "set", value_parser = parse_setting)]
    settings: Vec<(String, String)>,
    /// The demo's webhook receiver's listen address (port 0: any free port).
    #[arg(long, default_value = "127.0.0.1:0")]
    webhook_receiver_listen: std::net::SocketAddr,
}

fn parse_setting(s: &str) -> Result<(String, String), String> {
    let (k, v) = s.split_once('=').ok_or("expected NAME=VALUE")?;
    if k.is_empty()
        || !k
            .bytes()
            .all(|b| b.is_ascii_uppercase() || b.is_ascii_digit() || b == b'_')
    {
        return Err(format!("{k}: a setting's name is upper case"));
    }
    Ok((k.to_string(), v.to_string()))
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
/// `scripts/cluster down`. A process that dies is reported and restarted after
/// `--restart-after-secs` (meanwhile its stand-by or the other replica carries on).
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
    let mut procs = Vec::new();
    let booted = boot(&args, &dir, &mut stack, &pg, &mut procs).await;
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
    let outcome = supervise(
        &mut stack,
        &procs,
        &summary.haproxy,
        &dir,
        args.restart_after_secs,
    )
    .await;
    stack.shutdown();
    drop(pg);
    println!("stopped postgres primary and standby");
    outcome
}

struct Summary {
    text: String,
    /// HAProxy's line of the processes file (it is not restarted, so its line never changes).
    haproxy: String,
    _demo: Option<demo::DemoOutcome>,
}

/// A role's process as the cluster runs it: its settings and the address it listens on. Each
/// start binds that address and hands the socket over; the cluster keeps no copy, so while
/// the process is dead its port refuses connections (HAProxy retries them on the other
/// replica) rather than queueing them for a process that will first answer `503 starting`.
struct Proc {
    role: &'static Role,
    vars: Vec<(String, String)>,
    addr: std::net::SocketAddr,
    /// `/metrics` of an API replica (its public socket serves the API).
    metrics: Option<u16>,
}

impl Proc {
    fn start(&self, stack: &mut Stack) -> Result<()> {
        let socket = Reserved::bind(&self.addr.to_string())
            .with_context(|| format!("{}: bind {}", self.role.name, self.addr))?;
        let log = stack.append_log(self.role.name)?;
        let mut cmd = service_command(&services::bin(self.role.bin)?, self.role.args, &self.vars);
        cmd.stdin(socket.stdin())
            .stdout(Stdio::from(log.try_clone()?))
            .stderr(Stdio::from(log));
        stack.spawn(self.role.name, cmd)
    }

    fn line(&self, stack: &Stack) -> String {
        format!(
            "{} {} http://{}{}{}",
            self.role.name,
            stack.pid(self.role.name).unwrap_or(0),
            self.addr,
            self.role.health,
            self.metrics
                .map(|m| format!(" metrics=127.0.0.1:{m}"))
                .unwrap_or_default()
        )
    }
}

/// Writes the processes' names, pids and health addresses for `status` (and a rehearsal).
fn list(stack: &Stack, procs: &[Proc], extra: &str, dir: &Path) -> Result<String> {
    let mut text: String = procs.iter().map(|p| p.line(stack) + "\n").collect();
    text.push_str(extra);
    let tmp = dir.join(format!("{PROCESSES_FILE}.tmp"));
    std::fs::write(&tmp, &text)?;
    std::fs::rename(&tmp, dir.join(PROCESSES_FILE))?;
    Ok(text)
}

/// Holds the cluster until Ctrl-C or SIGTERM. A role's process that dies is reported and,
/// `restart_after` seconds later, started again on the same address (0: left dead); anvil and
/// HAProxy are not restarted.
async fn supervise(
    stack: &mut Stack,
    procs: &[Proc],
    extra: &str,
    dir: &Path,
    restart_after: u64,
) -> Result<()> {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate())?;
    let mut int = signal(SignalKind::interrupt())?;
    let mut tick = tokio::time::interval(Duration::from_millis(250));
    let mut dead: std::collections::HashMap<&'static str, Instant> = Default::default();
    loop {
        tokio::select! {
            _ = int.recv() => { println!("interrupted: stopping"); return Ok(()) }
            _ = term.recv() => { println!("terminated: stopping"); return Ok(()) }
            _ = tick.tick() => {}
        }
        for name in stack.all_exited() {
            if dead.contains_key(name) {
                continue;
            }
            dead.insert(name, Instant::now());
            println!("{name} exited; see {}/{name}.log", dir.display());
        }
        if restart_after == 0 {
            continue;
        }
        let due: Vec<&'static str> = dead
            .iter()
            .filter(|(_, at)| at.elapsed() >= Duration::from_secs(restart_after))
            .map(|(n, _)| *n)
            .collect();
        for name in due {
            let Some(p) = procs.iter().find(|p| p.role.name == name) else {
                continue;
            };
            if let Err(e) = p.start(stack) {
                println!("{name} not restarted yet: {e:#}");
                continue;
            }
            dead.remove(name);
            list(stack, procs, extra, dir)?;
            println!("restarted {name}");
        }
    }
}

async fn boot(
    args: &ClusterArgs,
    dir: &Path,
    stack: &mut Stack,
    pg: &ReplicatedPg,
    procs: &mut Vec<Proc>,
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
    for (k, v) in &args.settings {
        // `StackEnv` keeps names as static strings; a setting given here lives as long.
        env.push(Box::leak(k.clone().into_boxed_str()), v.clone());
    }
    let env_file = env.write(dir)?;

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
        let p = Proc {
            role,
            vars,
            addr: socket.addr,
            metrics,
        };
        drop(socket);
        p.start(stack)?;
        procs.push(p);
    }
    for (name, port) in &apis {
        services::wait_healthy(stack, name, &format!("http://127.0.0.1:{port}")).await?;
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
    let haproxy = format!(
        "haproxy {} {base}/api/v1/health\n",
        stack.pid("haproxy").unwrap_or(0)
    );
    let listed = list(stack, procs, &haproxy, dir)?;
    services::wait_healthy(stack, "haproxy", &base).await?;
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
    Ok(Summary {
        text,
        haproxy,
        _demo: demo,
    })
}

/// HAProxy's configuration: one frontend, the API replicas round-robin with health checks on
/// the API's readiness (`/api/v1/health` answers 503 while it starts or its database is
/// unreachable), a refused connection retried on the other replica and its server marked
/// down at once (up again at its next good health check). A GET (or HEAD) whose replica died
/// before answering is retried on the other (`empty-response`); any other method only when
/// its connection was refused, since it may have been carried out. Server-side connections close after
/// each response (`http-server-close`; clients keep theirs alive): a client connection tied
/// to a replica's idle connection would otherwise be closed with it when that replica dies,
/// under a request the client was just sending.
fn haproxy_config(frontend: &str, stats: &str, apis: &[(&str, u16)]) -> String {
    let mut servers = String::new();
    for (name, port) in apis {
        let _ = writeln!(servers, "    server {name} 127.0.0.1:{port} check");
    }
    format!(
        "global\n    maxconn 4096\n    log stdout format raw local0\n\n\
         defaults\n    mode http\n    log global\n    option httplog\n    timeout connect 2s\n    timeout client 75s\n    timeout server 60s\n    timeout http-keep-alive 75s\n    option redispatch\n    option http-server-close\n    retries 3\n    retry-on conn-failure empty-response response-timeout\n\n\
         frontend api\n    bind {frontend}\n    option forwardfor\n    default_backend apis\n\n\
         backend apis\n    balance roundrobin\n    http-request disable-l7-retry if !METH_GET\n    option httpchk GET /api/v1/health\n    http-check expect status 200\n    default-server inter 1s fall 2 rise 1 observe layer4 error-limit 1 on-error mark-down\n{servers}\n\
         listen stats\n    bind {stats}\n    stats enable\n    stats uri /\n"
    )
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
