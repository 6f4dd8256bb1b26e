//! A private Postgres primary and its hot-standby streaming replica: real servers made with
//! `initdb` and `pg_basebackup`, each on its own port, stopped and removed when dropped. For
//! tests of what reads from a replica (the shared server on 5432 stays untouched).

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::process::{Reserved, scratch_dir};

/// Where Debian's PostgreSQL 15 keeps its server programs.
pub const PG_BIN: &str = "/usr/lib/postgresql/15/bin";

/// One running Postgres server of this kit.
#[derive(Debug)]
pub struct PgServer {
    pub data: PathBuf,
    pub port: u16,
}

impl PgServer {
    /// The URL of database `db` on this server.
    pub fn url(&self, db: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{db}", self.port)
    }

    /// Stops the server at once (as a crash would); its data stays.
    pub fn kill(&self) {
        let _ = pg(
            "pg_ctl",
            &["-D", path(&self.data), "-m", "immediate", "-w", "stop"],
        );
    }

    /// Starts the server again on its port.
    pub fn restart(&self) {
        start(&self.data, self.port);
    }
}

/// A primary and a standby that streams its WAL.
#[derive(Debug)]
pub struct ReplicatedPg {
    root: PathBuf,
    pub primary: PgServer,
    pub standby: PgServer,
}

impl ReplicatedPg {
    /// `initdb`, start, `pg_basebackup -R`, start the standby, in a scratch directory on
    /// free ports. Panics with the programs' output when a step fails.
    pub fn start() -> Self {
        Self::start_in(scratch_dir("chainsub-pg"), 0, 0)
    }

    /// [`ReplicatedPg::start`] in `root` (emptied first) on the given ports (0: a free one).
    pub fn start_in(root: PathBuf, primary_port: u16, standby_port: u16) -> Self {
        let pick = |p: u16| if p == 0 { free_port() } else { p };
        // Servers a previous run left on these directories (its process was killed) go first.
        for data in [root.join("standby"), root.join("primary")] {
            if data.join("postmaster.pid").exists() {
                let _ = pg(
                    "pg_ctl",
                    &["-D", path(&data), "-m", "immediate", "-w", "stop"],
                );
            }
        }
        let _ = std::fs::remove_dir_all(&root);
        std::fs::create_dir_all(&root).expect("the servers' directory");
        chown_to_postgres(&root);
        let primary = PgServer {
            data: root.join("primary"),
            port: pick(primary_port),
        };
        run(
            "initdb",
            &[
                "-D",
                path(&primary.data),
                "-U",
                "postgres",
                "-A",
                "trust",
                "--no-sync",
                "--no-instructions",
            ],
        );
        start(&primary.data, primary.port);
        let standby = PgServer {
            data: root.join("standby"),
            port: pick(standby_port),
        };
        run(
            "pg_basebackup",
            &[
                "-h",
                "127.0.0.1",
                "-p",
                &primary.port.to_string(),
                "-U",
                "postgres",
                "-D",
                path(&standby.data),
                "-R",
                // A replication slot: the primary keeps the WAL a stopped standby has not
                // replayed yet, so it catches up when it starts again.
                "-C",
                "-S",
                "standby",
                "-X",
                "stream",
                "--no-sync",
            ],
        );
        start(&standby.data, standby.port);
        Self {
            root,
            primary,
            standby,
        }
    }
}

impl Drop for ReplicatedPg {
    fn drop(&mut self) {
        self.standby.kill();
        self.primary.kill();
        let _ = std::fs::remove_dir_all(&self.root);
    }
}

fn free_port() -> u16 {
    Reserved::new().port
}

fn start(data: &Path, port: u16) {
    let options = format!(
        "-p {port} -k {} -c listen_addresses=127.0.0.1 -c fsync=off -c wal_level=replica \
         -c max_wal_senders=4 -c hot_standby=on -c shared_buffers=32MB",
        path(data.parent().expect("a data directory's parent"))
    );
    let log = data.with_extension("log");
    run(
        "pg_ctl",
        &[
            "-D",
            path(data),
            "-o",
            &options,
            "-l",
            path(&log),
            "-w",
            "start",
        ],
    );
}

fn path(p: &Path) -> &str {
    p.to_str().expect("a UTF-8 path")
}

/// Runs a PostgreSQL program as the `postgres` user (the server refuses to run as root).
fn pg(program: &str, args: &[&str]) -> Output {
    let exe = format!("{PG_BIN}/{program}");
    let mut cmd = if is_root() {
        let mut c = Command::new("runuser");
        c.args(["-u", "postgres", "--", &exe]);
        c
    } else {
        Command::new(&exe)
    };
    cmd.args(args)
        .output()
        .unwrap_or_else(|e| panic!("{program}: {e}"))
}

fn run(program: &str, args: &[&str]) {
    let out = pg(program, args);
    assert!(
        out.status.success(),
        "{program} {args:?}: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

fn is_root() -> bool {
    static ROOT: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *ROOT.get_or_init(|| {
        Command::new("id")
            .arg("-u")
            .output()
            .map(|o| o.stdout.trim_ascii() == b"0")
            .unwrap_or(false)
    })
}

fn chown_to_postgres(dir: &Path) {
    if is_root() {
        let ok = Command::new("chown")
            .args(["postgres:postgres", path(dir)])
            .status()
            .is_ok_and(|s| s.success());
        assert!(ok, "chown postgres {}", dir.display());
    }
}
