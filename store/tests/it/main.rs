//! The store's statements against a real, migrated Postgres database.

use chainsub_store::{events, plans, subscriptions};
use chainsub_tests::TestDb;

/// Every list statement pages by an index condition on its key even under a generic plan
/// (Postgres switches a prepared statement to one after five executions): otherwise each
/// `startingAfter` page reads every newer row of the merchant, and walking a list is
/// quadratic. `($n IS NULL OR key < $n)` fails this; `key < COALESCE($n, max)` passes.
#[tokio::test]
async fn every_list_statement_pages_by_an_index_condition_under_a_generic_plan() {
    let db = TestDb::create().await;
    let c = db.connect().await;
    // Plan shapes, not costs: on empty tables the planner would scan sequentially anyway.
    c.batch_execute("SET plan_cache_mode = force_generic_plan; SET enable_seqscan = off")
        .await
        .unwrap();
    let all = [
        ("subscriptions", subscriptions::list_statements()),
        ("events", events::list_statements()),
        ("plans", plans::list_statements()),
    ];
    let mut checked = 0;
    for (name, texts) in all {
        for (i, text) in texts.into_iter().enumerate() {
            let params = (1..=20)
                .take_while(|n| text.contains(&format!("${n}")))
                .count();
            c.batch_execute(&format!("DEALLOCATE ALL; PREPARE q AS {text}"))
                .await
                .unwrap_or_else(|e| panic!("{name}[{i}]: {e}\n{text}"));
            let nulls = vec!["NULL"; params].join(", ");
            let plan: Vec<String> = c
                .query(&format!("EXPLAIN EXECUTE q({nulls})"), &[])
                .await
                .unwrap()
                .iter()
                .map(|r| r.get(0))
                .collect();
            // The cursor comparison of this statement, as the plan prints it.
            let cursor = if let Some(at) = text.find("COALESCE($") {
                let n: String = text[at + 10..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                format!("COALESCE(${n}")
            } else {
                let at = text.find(" > $").expect("a keyset comparison");
                let n: String = text[at + 4..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .collect();
                format!("> ${n}")
            };
            assert!(
                plan.iter()
                    .any(|l| l.contains("Index Cond") && l.contains(&cursor)),
                "{name}[{i}]: the cursor `{cursor}` is not an index condition:\n{}",
                plan.join("\n")
            );
            checked += 1;
        }
    }
    assert_eq!(checked, 8 + 6 + 2);
    // A fixed set: distinct texts, each scoped, with its page size as a parameter.
    let texts: Vec<&str> = [
        subscriptions::list_statements(),
        events::list_statements(),
        plans::list_statements(),
    ]
    .concat();
    let distinct: std::collections::HashSet<_> = texts.iter().collect();
    assert_eq!(distinct.len(), texts.len());
    for t in texts {
        assert!(
            t.contains("merchant_wallet = $") || t.contains("merchant_id = $1"),
            "{t}"
        );
        assert!(
            t.contains(" DESC LIMIT $") || t.contains(" ASC LIMIT $"),
            "{t}"
        );
    }
}

/// Issue 10, point 7: every binary connects through `store::pg`, which honours libpq's
/// `sslmode` with rustls. Against the local cluster (Debian turns TLS on with a self-signed
/// certificate for `localhost`, `/etc/ssl/certs/ssl-cert-snakeoil.pem`).
#[tokio::test]
async fn database_urls_connect_with_the_tls_their_sslmode_asks_for() {
    use chainsub_store::pg::{Database, TlsMode};

    let admin = chainsub_tests::db::admin_url();
    let plain = chainsub_tests::db::connect(&admin).await;
    let ssl_on: String = plain.query_one("SHOW ssl", &[]).await.unwrap().get(0);
    assert_eq!(ssl_on, "on", "this test needs the cluster's TLS (ssl = on)");
    let ca = "/etc/ssl/certs/ssl-cert-snakeoil.pem";

    let with = |host: &str, query: &str| {
        let mut u = url::Url::parse(&admin).unwrap();
        u.set_host(Some(host)).unwrap();
        u.set_query(if query.is_empty() { None } else { Some(query) });
        u.to_string()
    };
    let encrypted = |db: Database| async move {
        let c = db.connect().await?;
        let row = c
            .query_one(
                "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
                &[],
            )
            .await?;
        Ok::<bool, tokio_postgres::Error>(row.get(0))
    };

    let cases = [
        (
            with("127.0.0.1", "sslmode=disable"),
            TlsMode::Disable,
            false,
        ),
        (with("127.0.0.1", ""), TlsMode::Prefer, true),
        (with("127.0.0.1", "sslmode=prefer"), TlsMode::Prefer, true),
        (with("127.0.0.1", "sslmode=require"), TlsMode::Require, true),
        (
            with(
                "localhost",
                &format!("sslmode=verify-full&sslrootcert={ca}"),
            ),
            TlsMode::VerifyFull,
            true,
        ),
    ];
    for (url, mode, tls) in cases {
        let db = Database::from_url(&url).unwrap();
        assert_eq!(db.mode(), mode, "{url}");
        assert_eq!(encrypted(db).await.unwrap(), tls, "{url}");
    }

    // verify-full refuses a certificate for another name, and one from another CA.
    let wrong_name = with(
        "127.0.0.1",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    );
    let e = encrypted(Database::from_url(&wrong_name).unwrap())
        .await
        .expect_err("127.0.0.1 is not the certificate's name");
    assert!(format!("{e:?}").contains("NotValidForName"), "{e:?}");
    let other_ca = "/etc/ssl/certs/ca-certificates.crt";
    if std::path::Path::new(other_ca).exists() {
        let wrong_ca = with(
            "localhost",
            &format!("sslmode=verify-full&sslrootcert={other_ca}"),
        );
        let e = encrypted(Database::from_url(&wrong_ca).unwrap())
            .await
            .expect_err("the public CAs did not sign the cluster's certificate");
        assert!(format!("{e:?}").contains("UnknownIssuer"), "{e:?}");
    }

    // And a pool made from it (what the API and keeper use) is encrypted too.
    let db = Database::from_url(&with(
        "localhost",
        &format!("sslmode=verify-full&sslrootcert={ca}"),
    ))
    .unwrap();
    let pool = deadpool_postgres::Pool::builder(db.manager(Default::default()))
        .max_size(1)
        .build()
        .unwrap();
    let c = pool.get().await.unwrap();
    let ssl: bool = c
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert!(ssl);
}
