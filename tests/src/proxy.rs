//! A switchable TCP proxy: forwards a local port to a dependency (Postgres, the RPC) while
//! enabled; disabled, it refuses new connections and cuts open ones — an outage of the
//! dependency behind it, for the tests of what a service does through one. Frozen, its open
//! connections stay open and carry nothing (a silent network partition, a half-open
//! connection) while new ones work.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tokio::net::{TcpListener, TcpStream};

/// Forwards 127.0.0.1:port to `target` while enabled; when disabled it refuses new
/// connections and cuts the open ones.
pub struct Proxy {
    pub addr: SocketAddr,
    enabled: Arc<AtomicBool>,
    epoch: tokio::sync::watch::Sender<u64>,
    frozen: tokio::sync::watch::Sender<u64>,
}

impl Proxy {
    /// Enabled, in front of `target`.
    pub async fn start(target: SocketAddr) -> Self {
        let p = Self::start_disabled(target).await;
        p.enable();
        p
    }

    /// Disabled (the dependency is down) until [`Proxy::enable`].
    pub async fn start_disabled(target: SocketAddr) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let enabled = Arc::new(AtomicBool::new(false));
        let (epoch, _) = tokio::sync::watch::channel(0u64);
        let (frozen, _) = tokio::sync::watch::channel(0u64);
        let (en, ep, fr) = (enabled.clone(), epoch.clone(), frozen.clone());
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else {
                    break;
                };
                if !en.load(Ordering::SeqCst) {
                    drop(inbound);
                    continue;
                }
                let mut cut = ep.subscribe();
                let mut freeze = fr.subscribe();
                tokio::spawn(async move {
                    let Ok(outbound) = TcpStream::connect(target).await else {
                        return;
                    };
                    let (mut ri, mut wi) = inbound.into_split();
                    let (mut ro, mut wo) = outbound.into_split();
                    tokio::select! {
                        _ = tokio::io::copy(&mut ri, &mut wo) => {}
                        _ = tokio::io::copy(&mut ro, &mut wi) => {}
                        _ = cut.changed() => {}
                        // Holds both sockets open, carrying nothing, until cut.
                        _ = freeze.changed() => {
                            let _ = cut.changed().await;
                        }
                    }
                });
            }
        });
        Self {
            addr,
            enabled,
            epoch,
            frozen,
        }
    }

    pub fn disable(&self) {
        self.enabled.store(false, Ordering::SeqCst);
        self.epoch.send_modify(|e| *e += 1);
    }

    /// The connections open now stop carrying data but stay open; new ones work.
    pub fn freeze(&self) {
        self.frozen.send_modify(|e| *e += 1);
    }

    pub fn enable(&self) {
        self.enabled.store(true, Ordering::SeqCst);
    }
}

/// Host:port of a postgres/http URL.
pub fn target_of(url: &str) -> SocketAddr {
    let u = url::Url::parse(url).unwrap();
    let host = u.host_str().unwrap();
    let host = if host == "localhost" {
        "127.0.0.1"
    } else {
        host
    };
    format!("{host}:{}", u.port().unwrap_or(5432))
        .parse()
        .unwrap()
}

/// `url` with its host:port replaced by `addr`.
pub fn via(url: &str, addr: SocketAddr) -> String {
    let mut u = url::Url::parse(url).unwrap();
    u.set_host(Some(&addr.ip().to_string())).unwrap();
    u.set_port(Some(addr.port())).unwrap();
    u.to_string()
}
