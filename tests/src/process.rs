//! Processes, ports and paths.

use std::net::{SocketAddr, TcpListener};
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// The workspace root (the directory holding the top-level Cargo.toml).
pub fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests/ has a parent")
        .to_path_buf()
}

/// The crates the binaries (`indexer`, `keeper`, `api`) are built from.
pub const BINARY_CRATES: [&str; 11] = [
    "api",
    "indexer",
    "keeper",
    "webhooks",
    "serve",
    "store",
    "views",
    "sender",
    "core",
    "abi",
    "migrations",
];

/// The text of every `.rs` file under the `src/` of [`BINARY_CRATES`] (no tests, benches or
/// dev tools): what checks of "does a binary say X" read.
pub fn binary_sources() -> Vec<String> {
    let mut out = Vec::new();
    let mut stack: Vec<PathBuf> = BINARY_CRATES
        .iter()
        .map(|c| workspace_root().join(c).join("src"))
        .collect();
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).expect("a source directory") {
            let path = entry.expect("a directory entry").path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(std::fs::read_to_string(&path).expect("a source file"));
            }
        }
    }
    out
}

/// A listening socket on 127.0.0.1, on a port the OS chose, held open from the moment it is
/// bound: a service started with [`Reserved::stdin`] as its standard input and
/// `…_LISTEN=stdin` serves on it (see `chainsub_core::listen`), so the port is known before
/// the service starts and no other process can take it in between (the race of picking a
/// "free" port and binding it later). The socket stays open here too, so a service
/// restarted on the same `Reserved` keeps its port; connections made while it is down wait
/// in the backlog.
#[derive(Debug)]
pub struct Reserved {
    listener: TcpListener,
    pub addr: SocketAddr,
    pub port: u16,
}

impl Reserved {
    /// A socket on 127.0.0.1 and a port the OS chose.
    pub fn new() -> Self {
        Self::bind("127.0.0.1:0").expect("bind 127.0.0.1:0")
    }

    /// A socket on `addr` (`host:port`; port 0 lets the OS choose).
    pub fn bind(addr: &str) -> std::io::Result<Self> {
        let listener = TcpListener::bind(addr)?;
        let addr = listener.local_addr()?;
        Ok(Self {
            listener,
            addr,
            port: addr.port(),
        })
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The socket as a child's standard input (pair it with `…_LISTEN=stdin`).
    pub fn stdin(&self) -> Stdio {
        let fd = OwnedFd::from(self.listener.try_clone().expect("dup the listening socket"));
        Stdio::from(fd)
    }
}

impl Default for Reserved {
    fn default() -> Self {
        Self::new()
    }
}

/// The TCP port a child listens on once it has bound one (a service started on port 0):
/// found by matching the socket inodes among `/proc/<pid>/fd` with the listening sockets in
/// `/proc/net/tcp{,6}`. Errors when the child exits or `within` passes first.
pub fn listening_port(child: &mut Child, within: Duration) -> Result<u16, String> {
    let deadline = Instant::now() + within;
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("exited ({status}) before listening"));
        }
        if let Some(port) = port_of_pid(child.id()) {
            return Ok(port);
        }
        if Instant::now() > deadline {
            return Err(format!("no listening socket after {within:?}"));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn port_of_pid(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter_map(|t| {
            let t = t.to_string_lossy();
            Some(t.strip_prefix("socket:[")?.strip_suffix(']')?.to_string())
        })
        .collect();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let text = std::fs::read_to_string(table).unwrap_or_default();
        for line in text.lines().skip(1) {
            // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
            let cols: Vec<&str> = line.split_whitespace().collect();
            if cols.len() > 9 && cols[3] == "0A" && inodes.iter().any(|i| i == cols[9]) {
                let port_hex = cols[1].rsplit(':').next()?;
                return u16::from_str_radix(port_hex, 16).ok();
            }
        }
    }
    None
}

/// One plain `GET path` on 127.0.0.1:`port`: the status and the body, `None` when nothing
/// answers (health and metrics endpoints of spawned services).
pub fn http_get(port: u16, path: &str) -> Option<(u16, String)> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).ok()?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
    s.write_all(req.as_bytes()).ok()?;
    let mut out = String::new();
    s.read_to_string(&mut out).ok()?;
    let code = out.split_whitespace().nth(1)?.parse().ok()?;
    let body = out
        .split_once("\r\n\r\n")
        .map_or("", |(_, b)| b)
        .to_string();
    Some((code, body))
}

/// A fresh directory under the system's temporary directory, unique to this process and
/// call: `<tmp>/<prefix>-<pid>-<n>`.
pub fn scratch_dir(prefix: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let dir = std::env::temp_dir().join(format!(
        "{prefix}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch directory");
    dir
}

/// Path of a workspace binary (`indexer`, `keeper`, `api`) built in the same profile as the
/// running test. Build them first: `cargo build --workspace --bins`.
pub fn bin_path(name: &str) -> PathBuf {
    let exe = std::env::current_exe().expect("current_exe");
    // target/<profile>/deps/<test>-<hash> -> target/<profile>/<name>
    let dir = exe.parent().and_then(|d| d.parent()).expect("target dir");
    let path = dir.join(name);
    assert!(
        path.exists(),
        "{} is missing: run `cargo build --workspace --bins` before the tests",
        path.display()
    );
    path
}

/// Kills (SIGKILL) and reaps the child when dropped, so a failing test leaves no process.
#[derive(Debug)]
pub struct ChildGuard(pub Child);

impl ChildGuard {
    /// The child's pid.
    pub fn id(&self) -> u32 {
        self.0.id()
    }

    /// Kills (SIGKILL) and reaps the child now: a crash at this point of a test.
    pub fn kill(mut self) {
        self.0.kill().expect("SIGKILL the child");
        self.0.wait().expect("reap the child");
    }

    /// Sends `signal` (e.g. `-STOP`, `-CONT`) with kill(1); panics if it cannot be sent.
    pub fn signal(&self, signal: &str) {
        let sent = std::process::Command::new("kill")
            .args([signal, &self.0.id().to_string()])
            .status()
            .is_ok_and(|s| s.success());
        assert!(sent, "kill {signal} {}", self.0.id());
    }

    /// Sends SIGTERM and waits up to `secs` for a clean exit; returns whether it exited.
    pub fn terminate(&mut self, secs: u64) -> Option<std::process::ExitStatus> {
        let _ = std::process::Command::new("kill")
            .args(["-TERM", &self.0.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(secs);
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Some(status);
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        None
    }
}

impl Drop for ChildGuard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}
