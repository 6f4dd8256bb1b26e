//! A fresh anvil per test, from the npm package pinned in package-lock.json.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::process::{ChildGuard, listening_port, workspace_root};

/// A running anvil, killed on drop.
#[derive(Debug)]
pub struct Anvil {
    pub port: u16,
    pub url: String,
    pub chain_id: u64,
    _child: ChildGuard,
}

/// The anvil binary: `$ANVIL_BIN`, else the native binary of this platform's
/// `@foundry-rs/anvil-<os>-<arch>` package, else `node_modules/.bin/anvil` (run
/// `scripts/chain-tools`). The native binary comes first because `.bin/anvil` is a node
/// wrapper: killing the wrapper would leave the real anvil running as an orphan.
pub fn anvil_bin() -> PathBuf {
    if let Ok(p) = std::env::var("ANVIL_BIN") {
        return PathBuf::from(p);
    }
    let root = workspace_root();
    let os = match std::env::consts::OS {
        "macos" => "darwin",
        "windows" => "win32",
        other => other,
    };
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => other,
    };
    let native = root.join(format!(
        "node_modules/@foundry-rs/anvil-{os}-{arch}/bin/anvil"
    ));
    if native.exists() {
        return native;
    }
    let p = root.join("node_modules/.bin/anvil");
    assert!(
        p.exists(),
        "{} is missing: run `scripts/chain-tools` first",
        p.display()
    );
    p
}

impl Anvil {
    /// The node's URL as the services take it.
    pub fn rpc_url(&self) -> chainsub_core::RpcUrl {
        self.url.parse().expect("anvil's URL")
    }

    /// Starts anvil with chain id 31337 and instant mining.
    pub fn start() -> Self {
        Self::start_with(&[])
    }

    /// Starts anvil with extra arguments (e.g. `["--block-time", "1"]`). Anvil binds port 0
    /// itself and the port is read back from its listening socket (see
    /// [`listening_port`]), so no other process can take it between choosing and binding.
    pub fn start_with(extra: &[&str]) -> Self {
        let chain_id = 31337;
        let child = Command::new(anvil_bin())
            .args(["--port", "0", "--chain-id", &chain_id.to_string()])
            .args(["--host", "127.0.0.1", "--silent"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn anvil");
        let mut guard = ChildGuard(child);
        let port = listening_port(&mut guard.0, Duration::from_secs(20))
            .unwrap_or_else(|e| panic!("anvil did not start: {e}"));
        let url = format!("http://127.0.0.1:{port}");
        assert!(
            wait_ready(&url, &mut guard),
            "anvil on {url} did not answer"
        );
        Self {
            port,
            url,
            chain_id,
            _child: guard,
        }
    }
}

fn wait_ready(url: &str, child: &mut ChildGuard) -> bool {
    let deadline = Instant::now() + Duration::from_secs(20);
    let body = r#"{"jsonrpc":"2.0","id":1,"method":"eth_chainId","params":[]}"#;
    let addr = url.trim_start_matches("http://").to_string();
    while Instant::now() < deadline {
        if let Ok(Some(_)) = child.0.try_wait() {
            return false;
        }
        if let Ok(mut s) = std::net::TcpStream::connect(&addr) {
            use std::io::{Read, Write};
            let req = format!(
                "POST / HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
            let mut out = String::new();
            if s.write_all(req.as_bytes()).is_ok()
                && s.read_to_string(&mut out).is_ok()
                && out.contains("\"result\"")
            {
                return true;
            }
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    false
}
