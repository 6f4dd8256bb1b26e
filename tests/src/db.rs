//! A fresh Postgres database per test.

use std::sync::atomic::{AtomicU32, Ordering};

use tokio_postgres::{Client, NoTls};

/// The server tests create databases on: `$TEST_DATABASE_ADMIN_URL`, else the local one.
pub fn admin_url() -> String {
    std::env::var("TEST_DATABASE_ADMIN_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/postgres".to_string())
}

/// A migrated database that exists for the life of the value and is dropped after.
#[derive(Debug)]
pub struct TestDb {
    pub name: String,
    pub url: String,
    /// The server's administrative database, where it is created and dropped.
    admin: String,
}

static COUNTER: AtomicU32 = AtomicU32::new(0);

impl TestDb {
    /// Creates and migrates a new database.
    pub async fn create() -> Self {
        Self::create_on(&admin_url()).await
    }

    /// Creates and migrates a new database on the server of `admin` (its administrative
    /// database's URL).
    pub async fn create_on(admin: &str) -> Self {
        let db = Self::create_empty_on(admin).await;
        let mut client = db.connect().await;
        chainsub_migrations::migrate(&mut client)
            .await
            .expect("migrate");
        db
    }

    /// Creates a new database without applying migrations.
    pub async fn create_empty() -> Self {
        Self::create_empty_on(&admin_url()).await
    }

    async fn create_empty_on(base: &str) -> Self {
        let name = format!(
            "chainsub_test_{}_{}_{}",
            std::process::id(),
            COUNTER.fetch_add(1, Ordering::Relaxed),
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .subsec_nanos()
        );
        let admin = connect(base).await;
        admin
            .batch_execute(&format!("CREATE DATABASE {name}"))
            .await
            .expect("create database");
        let url = match base.rfind('/') {
            Some(i) => format!("{}/{name}", &base[..i]),
            None => panic!("admin url without a database: {base}"),
        };
        Self {
            name,
            url,
            admin: base.to_string(),
        }
    }

    /// A new connection to this database.
    pub async fn connect(&self) -> Client {
        connect(&self.url).await
    }

    /// A pool of up to 8 connections to this database (what the services' store calls take
    /// where they cache statements).
    pub fn pool(&self) -> deadpool_postgres::Pool {
        pool(&self.url)
    }
}

/// A pool of up to 8 plaintext connections to `url`.
pub fn pool(url: &str) -> deadpool_postgres::Pool {
    use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
    let mgr = Manager::from_config(
        url.parse().expect("database url"),
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(mgr)
        .max_size(8)
        .runtime(Runtime::Tokio1)
        .build()
        .expect("pool")
}

/// The API's rows for `wallet`'s plan with on-chain reference `plan_ref` and `amount` base
/// units a month — what provisioning writes — so the keeper counts the plan as the
/// service's own and charges it. The merchant row is created when missing.
pub async fn register_plan(
    pg: &Client,
    wallet: alloy::primitives::Address,
    plan_ref: alloy::primitives::B256,
    amount: u64,
) {
    let slug = alloy::hex::encode(&plan_ref[..8]);
    pg.execute(
        "INSERT INTO merchants (public_id, wallet, code)
         VALUES ('mer_' || encode($1, 'hex'), $1, substr(encode($1, 'hex'), 1, 12))
         ON CONFLICT (wallet) DO NOTHING",
        &[&wallet.as_slice()],
    )
    .await
    .expect("merchant row");
    pg.execute(
        "INSERT INTO plans (public_id, merchant_id, name, amount, currency, interval, slug,
             plan_ref)
         SELECT 'plan_' || $2, m.id, 'Plan ' || $2, $3::TEXT::NUMERIC, 'USDC', 'month', $2, $4
         FROM merchants m WHERE m.wallet = $1",
        &[
            &wallet.as_slice(),
            &slug,
            &amount.to_string(),
            &plan_ref.as_slice(),
        ],
    )
    .await
    .expect("plan row");
}

/// Connects and drives the connection on a background task.
pub async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(async move {
        let _ = conn.await;
    });
    client
}

impl Drop for TestDb {
    fn drop(&mut self) {
        let (name, admin) = (self.name.clone(), self.admin.clone());
        // Drop runs inside or outside a runtime; a thread with its own runtime works in both.
        let _ = std::thread::spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            rt.block_on(async move {
                if let Ok((client, conn)) = tokio_postgres::connect(&admin, NoTls).await {
                    tokio::spawn(conn);
                    let _ = client
                        .batch_execute(&format!("DROP DATABASE IF EXISTS {name} WITH (FORCE)"))
                        .await;
                }
            })
        })
        .join();
    }
}
