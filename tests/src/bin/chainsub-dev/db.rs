//! The dev database: created on the server DATABASE_URL names, then migrated.

use std::str::FromStr;

use anyhow::{Context, Result, anyhow};
use tokio_postgres::{Config, NoTls};

/// Creates the database if it is missing (dropping it first when `reset`) and applies every
/// migration.
pub(crate) async fn prepare(url: &str, reset: bool) -> Result<()> {
    let config = Config::from_str(url).with_context(|| format!("parse DATABASE_URL {url}"))?;
    let name = config
        .get_dbname()
        .ok_or_else(|| anyhow!("DATABASE_URL names no database: {url}"))?
        .to_string();
    let mut admin_config = config.clone();
    admin_config.dbname("postgres");
    let (admin, conn) = admin_config
        .connect(NoTls)
        .await
        .with_context(|| format!("connect to the Postgres server of {url}"))?;
    tokio::spawn(conn);

    let ident = format!("\"{}\"", name.replace('"', "\"\""));
    if reset {
        admin
            .batch_execute(&format!("DROP DATABASE IF EXISTS {ident} WITH (FORCE)"))
            .await
            .with_context(|| format!("drop database {name}"))?;
    }
    let exists = admin
        .query_opt("SELECT 1 FROM pg_database WHERE datname = $1", &[&name])
        .await?
        .is_some();
    if !exists {
        admin
            .batch_execute(&format!("CREATE DATABASE {ident}"))
            .await
            .with_context(|| format!("create database {name}"))?;
    }

    let (mut client, conn) = config.connect(NoTls).await.context("connect")?;
    tokio::spawn(conn);
    let applied = chainsub_migrations::migrate(&mut client)
        .await
        .context("migrate")?;
    println!(
        "database {name}: {} (migrations applied: {applied:?})",
        match (reset, exists) {
            (true, _) => "recreated",
            (false, true) => "kept",
            (false, false) => "created",
        }
    );
    Ok(())
}
