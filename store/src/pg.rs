//! Postgres connections for every binary (api, dispatcher, indexer, keeper): one parser of
//! `DATABASE_URL` and one TLS connector, so every process speaks to the database the same way.
//!
//! `sslmode` follows libpq: `disable` (plaintext), `prefer` (TLS when the server offers it,
//! the default), `require` (TLS or nothing; the certificate is not checked, as in libpq) and
//! `verify-full` (TLS, a certificate chain to `sslrootcert=<PEM file>`, and the host name
//! in the certificate). TLS is rustls; nothing links OpenSSL.
//!
//! A connection that leaves this machine must be `verify-full`: anything weaker to a host
//! other than loopback or a Unix socket is refused at start unless the operator sets
//! `DATABASE_ALLOW_UNVERIFIED_TLS=true` ([`TlsPolicy`]).

use std::sync::Arc;

use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, RootCertStore, SignatureScheme};
use tokio::io::BufReader;
use tokio_postgres::Socket;
use tokio_postgres::config::SslMode;
use tokio_postgres::tls::{MakeTlsConnect, TlsConnect};
use tokio_postgres_rustls::MakeRustlsConnect;

/// A connection's driver (what `connect_raw` hands back to be polled).
pub type Connection =
    tokio_postgres::Connection<Socket, <ReadAhead as MakeTlsConnect<Socket>>::Stream>;

/// How a connection uses TLS (`sslmode`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsMode {
    Disable,
    Prefer,
    Require,
    VerifyFull,
}

impl TlsMode {
    /// The `sslmode` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Disable => "disable",
            Self::Prefer => "prefer",
            Self::Require => "require",
            Self::VerifyFull => "verify-full",
        }
    }
}

/// Whether a connection weaker than `verify-full` may leave this machine.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TlsPolicy {
    /// Off this machine (a host other than loopback or a Unix socket), `verify-full` only.
    VerifyFullOffHost,
    /// Any `sslmode` to any host (`DATABASE_ALLOW_UNVERIFIED_TLS=true`).
    AllowUnverified,
}

impl TlsPolicy {
    /// The environment's: `DATABASE_ALLOW_UNVERIFIED_TLS=true` (or `1`) allows it.
    pub fn from_env() -> Self {
        match std::env::var("DATABASE_ALLOW_UNVERIFIED_TLS").as_deref() {
            Ok("true" | "1") => Self::AllowUnverified,
            _ => Self::VerifyFullOffHost,
        }
    }
}

/// Whether every host the configuration may connect to is this machine: Unix sockets,
/// `localhost` and loopback addresses (no host at all means the local socket).
fn only_this_machine(config: &tokio_postgres::Config) -> bool {
    use tokio_postgres::config::Host;
    let loopback = |h: &str| {
        h == "localhost"
            || h.trim_start_matches('[')
                .trim_end_matches(']')
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    };
    let addrs_local = config.get_hostaddrs().iter().all(|ip| ip.is_loopback());
    addrs_local
        && config.get_hosts().iter().all(|h| match h {
            Host::Tcp(name) => loopback(name),
            #[cfg(unix)]
            Host::Unix(_) => true,
        })
}

/// A `DATABASE_URL` that cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("DATABASE_URL: {0}")]
pub struct ConfigError(String);

/// A parsed `DATABASE_URL` with its TLS connector.
#[derive(Clone)]
pub struct Database {
    config: tokio_postgres::Config,
    mode: TlsMode,
    tls: ReadAhead,
}

impl std::fmt::Debug for Database {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // tokio_postgres::Config's Debug redacts the password.
        f.debug_struct("Database")
            .field("config", &self.config)
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

impl Database {
    /// Parses a URL (`postgres://user@host:5432/db?sslmode=verify-full&sslrootcert=/ca.pem`)
    /// or a key=value string (`host=… dbname=… sslmode=…`), under the environment's
    /// [`TlsPolicy`].
    pub fn from_url(url: &str) -> Result<Self, ConfigError> {
        Self::from_url_with(url, TlsPolicy::from_env())
    }

    /// [`Database::from_url`] under `policy`.
    pub fn from_url_with(url: &str, policy: TlsPolicy) -> Result<Self, ConfigError> {
        let (rest, mode, root) = take_tls_params(url)?;
        let mut config: tokio_postgres::Config =
            rest.parse().map_err(|e| ConfigError(format!("{e}")))?;
        if mode != TlsMode::VerifyFull
            && policy == TlsPolicy::VerifyFullOffHost
            && !only_this_machine(&config)
        {
            return Err(ConfigError(format!(
                "sslmode={} to a host other than this machine is refused: connect with \
                 sslmode=verify-full&sslrootcert=<PEM file of the CA>, or set \
                 DATABASE_ALLOW_UNVERIFIED_TLS=true to allow it",
                mode.as_str()
            )));
        }
        config.ssl_mode(match mode {
            TlsMode::Disable => SslMode::Disable,
            TlsMode::Prefer => SslMode::Prefer,
            TlsMode::Require | TlsMode::VerifyFull => SslMode::Require,
        });
        let tls = ReadAhead(MakeRustlsConnect::new(client_config(
            mode,
            root.as_deref(),
        )?));
        Ok(Self { config, mode, tls })
    }

    /// The TLS mode in force.
    pub fn mode(&self) -> TlsMode {
        self.mode
    }

    /// The connection settings (e.g. to set a connect timeout).
    pub fn config_mut(&mut self) -> &mut tokio_postgres::Config {
        &mut self.config
    }

    /// One connection, driven on a background task.
    pub async fn connect(&self) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
        let (client, conn) = self.connect_raw().await?;
        tokio::spawn(async move {
            if let Err(e) = conn.await {
                tracing::warn!(error = %e, "postgres connection ended");
            }
        });
        Ok(client)
    }

    /// One connection and its driver, for callers that poll it themselves (LISTEN).
    pub async fn connect_raw(
        &self,
    ) -> Result<(tokio_postgres::Client, Connection), tokio_postgres::Error> {
        self.config.connect(self.tls.clone()).await
    }

    /// A deadpool manager over this database.
    pub fn manager(&self, config: deadpool_postgres::ManagerConfig) -> deadpool_postgres::Manager {
        deadpool_postgres::Manager::from_config(self.config.clone(), self.tls.clone(), config)
    }
}

/// How much a TLS connection reads from its socket at once. rustls asks its transport for
/// at most 4 KiB per read, so the API read an events page's rows in ~16 `recvfrom` calls;
/// reading ahead into this buffer makes it ~6 (allocated once per connection).
const READ_AHEAD: usize = 64 * 1024;

/// The rustls connector over a read-ahead buffer of [`READ_AHEAD`] bytes (writes go straight
/// through: `BufReader` buffers reads only).
#[derive(Clone)]
pub struct ReadAhead(MakeRustlsConnect);

type Buffered = BufReader<Socket>;
type InnerConnect = <MakeRustlsConnect as MakeTlsConnect<Buffered>>::TlsConnect;

impl MakeTlsConnect<Socket> for ReadAhead {
    type Stream = <InnerConnect as TlsConnect<Buffered>>::Stream;
    type TlsConnect = ReadAheadConnect;
    type Error = <MakeRustlsConnect as MakeTlsConnect<Buffered>>::Error;

    fn make_tls_connect(&mut self, domain: &str) -> Result<ReadAheadConnect, Self::Error> {
        MakeTlsConnect::<Buffered>::make_tls_connect(&mut self.0, domain).map(ReadAheadConnect)
    }
}

/// One connection's TLS handshake over the read-ahead buffer.
pub struct ReadAheadConnect(InnerConnect);

impl TlsConnect<Socket> for ReadAheadConnect {
    type Stream = <InnerConnect as TlsConnect<Buffered>>::Stream;
    type Error = <InnerConnect as TlsConnect<Buffered>>::Error;
    type Future = <InnerConnect as TlsConnect<Buffered>>::Future;

    fn connect(self, stream: Socket) -> Self::Future {
        // tokio-postgres has read the server's one-byte answer to SSLRequest from the bare
        // socket before this is called (and a plaintext fallback never gets here), so the
        // buffer only ever holds TLS records.
        self.0.connect(BufReader::with_capacity(READ_AHEAD, stream))
    }
}

/// Removes `sslmode` and `sslrootcert` (tokio-postgres knows neither `verify-full` nor
/// `sslrootcert`) and returns the rest with the mode and root-certificate path.
fn take_tls_params(url: &str) -> Result<(String, TlsMode, Option<String>), ConfigError> {
    let parse_mode = |v: &str| match v {
        "disable" => Ok(TlsMode::Disable),
        "prefer" => Ok(TlsMode::Prefer),
        "require" => Ok(TlsMode::Require),
        "verify-full" => Ok(TlsMode::VerifyFull),
        other => Err(ConfigError(format!(
            "sslmode `{other}` is not one of disable, prefer, require, verify-full"
        ))),
    };
    let mut mode = TlsMode::Prefer;
    let mut root = None;
    let rest = if url.contains("://") {
        let mut u = url::Url::parse(url).map_err(|e| ConfigError(e.to_string()))?;
        let mut kept = Vec::new();
        for (k, v) in u.query_pairs() {
            match k.as_ref() {
                "sslmode" => mode = parse_mode(&v)?,
                "sslrootcert" => root = Some(v.into_owned()),
                _ => kept.push((k.into_owned(), v.into_owned())),
            }
        }
        if kept.is_empty() {
            u.set_query(None);
        } else {
            u.query_pairs_mut().clear().extend_pairs(kept);
        }
        u.to_string()
    } else {
        let mut kept = Vec::new();
        for pair in url.split_whitespace() {
            match pair.split_once('=') {
                Some(("sslmode", v)) => mode = parse_mode(v)?,
                Some(("sslrootcert", v)) => root = Some(v.to_string()),
                _ => kept.push(pair),
            }
        }
        kept.join(" ")
    };
    if mode == TlsMode::VerifyFull && root.is_none() {
        return Err(ConfigError(
            "sslmode=verify-full needs sslrootcert=<PEM file of the CA>".into(),
        ));
    }
    Ok((rest, mode, root))
}

fn client_config(mode: TlsMode, root: Option<&str>) -> Result<ClientConfig, ConfigError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let builder = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .map_err(|e| ConfigError(e.to_string()))?;
    let config = if mode == TlsMode::VerifyFull {
        let path = root.unwrap_or_default();
        let pem =
            std::fs::read(path).map_err(|e| ConfigError(format!("sslrootcert {path}: {e}")))?;
        let mut roots = RootCertStore::empty();
        for cert in rustls_pemfile::certs(&mut pem.as_slice()) {
            let cert = cert.map_err(|e| ConfigError(format!("sslrootcert {path}: {e}")))?;
            roots
                .add(cert)
                .map_err(|e| ConfigError(format!("sslrootcert {path}: {e}")))?;
        }
        if roots.is_empty() {
            return Err(ConfigError(format!("sslrootcert {path}: no certificate")));
        }
        builder.with_root_certificates(roots).with_no_client_auth()
    } else {
        // libpq's `prefer` and `require` encrypt without checking who answers; the handshake
        // signature is still verified, so the session key belongs to the certificate shown.
        builder
            .dangerous()
            .with_custom_certificate_verifier(Arc::new(EncryptOnly(provider)))
            .with_no_client_auth()
    };
    Ok(config)
}

/// `sslmode=require`: any certificate, a valid handshake.
#[derive(Debug)]
struct EncryptOnly(Arc<CryptoProvider>);

impl ServerCertVerifier for EncryptOnly {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// Bounds a session that holds a lock on the server, so a holder that stops talking
/// without dying loses the lock in bounded time: a frozen process (SIGSTOP, a stuck VM)
/// keeps its TCP connection open and its kernel answers keepalives, so only Postgres-side
/// timeouts end its session — `idle_session_timeout` when frozen between statements,
/// `idle_in_transaction_session_timeout` when frozen inside a transaction (which then rolls
/// back). TCP keepalives (idle 5 s, every 2 s, 3 probes) end the session of a holder whose
/// host or network is gone. The holder must then use the session more often than `idle`.
pub async fn bound_lock_session(
    client: &tokio_postgres::Client,
    idle: std::time::Duration,
) -> Result<(), tokio_postgres::Error> {
    let ms = idle.as_millis().max(1);
    client
        .batch_execute(&format!(
            "SET idle_session_timeout = {ms}; SET idle_in_transaction_session_timeout = {ms}; \
             SET tcp_keepalives_idle = 5; SET tcp_keepalives_interval = 2; \
             SET tcp_keepalives_count = 3"
        ))
        .await
}

/// Takes the relayer send lock of the key with address `relayer` for the rest of `tx`
/// (`locks::relayer`): from reading the key's pending nonce until the node acknowledged the
/// send, no other API process signs with that key.
pub async fn lock_relayer_sends(
    tx: &tokio_postgres::Transaction<'_>,
    relayer: [u8; 20],
) -> Result<(), tokio_postgres::Error> {
    // Waiters hold a pooled connection: bound the wait, so a stuck holder cannot take the
    // whole pool with it (the send then fails and the plan can be retried).
    tx.batch_execute("SET LOCAL lock_timeout = '10s'").await?;
    tx.execute(
        "SELECT pg_advisory_xact_lock($1)",
        &[&chainsub_migrations::locks::relayer(relayer)],
    )
    .await?;
    Ok(())
}

/// Tries the session advisory lock `key` (the indexer's writer lock, the keeper's lock).
pub async fn try_lock(client: &tokio_postgres::Client, key: i64) -> crate::Result<bool> {
    Ok(client
        .query_one("SELECT pg_try_advisory_lock($1)", &[&key])
        .await?
        .get(0))
}

/// Waits for the session advisory lock `key` (a hot standby waits here).
pub async fn lock(client: &tokio_postgres::Client, key: i64) -> crate::Result<()> {
    client
        .execute("SELECT pg_advisory_lock($1)", &[&key])
        .await?;
    Ok(())
}

/// One round trip on `client`: an idle lock holder otherwise never notices that its
/// database went away.
pub async fn ping(client: &tokio_postgres::Client) -> Result<(), tokio_postgres::Error> {
    client.simple_query("").await.map(drop)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tls_params_are_taken_out_of_urls_and_key_value_strings() {
        let (rest, mode, root) = take_tls_params(
            "postgres://u@h:5432/d?sslmode=verify-full&sslrootcert=/ca.pem&application_name=x",
        )
        .unwrap();
        assert_eq!(rest, "postgres://u@h:5432/d?application_name=x");
        assert_eq!(
            (mode, root.as_deref()),
            (TlsMode::VerifyFull, Some("/ca.pem"))
        );
        let (rest, mode, _) = take_tls_params("postgres://u@h/d").unwrap();
        assert_eq!((rest.as_str(), mode), ("postgres://u@h/d", TlsMode::Prefer));
        let (rest, mode, _) = take_tls_params("host=h dbname=d sslmode=disable").unwrap();
        assert_eq!((rest.as_str(), mode), ("host=h dbname=d", TlsMode::Disable));
        assert!(take_tls_params("postgres://u@h/d?sslmode=verify-full").is_err());
        assert!(take_tls_params("postgres://u@h/d?sslmode=allow").is_err());
    }

    /// Issue 46, point 21: a connection that leaves this machine is verify-full unless the
    /// operator allows less in so many words; loopback and Unix sockets cross no network.
    #[test]
    fn off_this_machine_only_verify_full_unless_allowed() {
        let strict = TlsPolicy::VerifyFullOffHost;
        for url in [
            "postgres://u@db.example.com/d",
            "postgres://u@db.example.com/d?sslmode=require",
            "postgres://u@10.0.0.5/d?sslmode=prefer",
            "host=db.example.com dbname=d sslmode=disable",
            "postgres://u@localhost/d?host=db.example.com",
        ] {
            let e = Database::from_url_with(url, strict).expect_err(url);
            assert!(
                e.to_string().contains("verify-full")
                    && e.to_string().contains("DATABASE_ALLOW_UNVERIFIED_TLS"),
                "{url}: {e}"
            );
            assert!(
                Database::from_url_with(url, TlsPolicy::AllowUnverified).is_ok(),
                "{url}"
            );
        }
        for url in [
            "postgres://u@127.0.0.1/d",
            "postgres://u@localhost:5433/d?sslmode=disable",
            "postgres://u@[::1]/d?sslmode=require",
            "host=/var/run/postgresql dbname=d",
            "dbname=d",
        ] {
            assert!(Database::from_url_with(url, strict).is_ok(), "{url}");
        }
        let ca = "/etc/ssl/certs/ssl-cert-snakeoil.pem";
        if std::path::Path::new(ca).exists() {
            let url = format!("postgres://u@db.example.com/d?sslmode=verify-full&sslrootcert={ca}");
            assert!(Database::from_url_with(&url, strict).is_ok());
        }
    }
}
