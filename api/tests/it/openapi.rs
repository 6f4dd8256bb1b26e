//! The OpenAPI document is the truth: every served route is in it (and nothing else), and
//! real responses — successes and errors — validate against its schemas.

use std::collections::BTreeSet;

use crate::api_common::{
    App, Opts, Res, SNAP_COLUMNS, read, seed_cursor, seed_subscription, spawn,
};
use chainsub_api::app::API_ROUTES;
use chainsub_tests::chain::accounts::{MERCHANT, MERCHANT_B};
use chainsub_tests::{DevChain, dev_key};
use reqwest::Method;
use serde_json::{Value, json};

fn doc() -> Value {
    serde_json::from_str(chainsub_api::routes::openapi::OPENAPI_JSON).unwrap()
}

fn pointer<'a>(doc: &'a Value, r: &str) -> &'a Value {
    doc.pointer(r.trim_start_matches('#'))
        .unwrap_or_else(|| panic!("dangling $ref {r}"))
}

fn deref<'a>(doc: &'a Value, v: &'a Value) -> &'a Value {
    match v.get("$ref").and_then(Value::as_str) {
        Some(r) => pointer(doc, r),
        None => v,
    }
}

/// Validates a response against the document's entry for (method, path template).
fn check(doc: &Value, method: &str, template: &str, r: &Res) {
    let op = &doc["paths"][template][method.to_lowercase()];
    assert!(op.is_object(), "{method} {template} is not documented");
    let status = r.status.to_string();
    let resp = op["responses"].get(&status).unwrap_or_else(|| {
        panic!(
            "{method} {template}: status {status} is not documented ({:?})",
            r.body
        )
    });
    let resp = deref(doc, resp);
    // Documented headers marked required are present (X-Request-Id on every response).
    if let Some(hs) = resp["headers"].as_object() {
        for (name, h) in hs {
            if deref(doc, h)["required"] == true {
                assert!(
                    r.header(name).is_some(),
                    "{method} {template} {status}: header {name} missing"
                );
            }
        }
    }
    let schema = &resp["content"]["application/json"]["schema"];
    assert!(
        schema.is_object(),
        "{method} {template} {status}: no JSON schema"
    );
    let root = json!({
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "components": doc["components"],
        "allOf": [schema],
    });
    let validator = jsonschema::options()
        .should_validate_formats(true)
        .build(&root)
        .unwrap();
    let errors: Vec<String> = validator
        .iter_errors(&r.body)
        .map(|e| format!("{e} at {}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{method} {template} {status}: {errors:#?}\nbody: {:#}",
        r.body
    );
}

/// Whether `check` accepts the response (for proving the validation has teeth).
fn passes(doc: &Value, method: &str, template: &str, r: &Res) -> bool {
    let (doc, method, template) = (doc.clone(), method.to_string(), template.to_string());
    let r = Res {
        status: r.status,
        headers: r.headers.clone(),
        body: r.body.clone(),
    };
    std::panic::catch_unwind(move || check(&doc, &method, &template, &r)).is_ok()
}

#[test]
fn every_served_route_is_documented_and_every_documented_operation_is_served() {
    let doc = doc();
    let served: BTreeSet<(String, String)> = API_ROUTES
        .iter()
        .map(|(m, p)| (m.to_string(), p.to_string()))
        .collect();
    let mut documented = BTreeSet::new();
    for (path, item) in doc["paths"].as_object().unwrap() {
        for method in item.as_object().unwrap().keys() {
            documented.insert((method.to_uppercase(), path.clone()));
        }
    }
    assert_eq!(served, documented);
    assert_eq!(doc["openapi"], "3.1.0");
    let schemes = doc["components"]["securitySchemes"].as_object().unwrap();
    assert_eq!(schemes["bearerAuth"]["scheme"], "bearer");
    assert_eq!(schemes["sessionCookie"]["in"], "cookie");
}

fn concrete(template: &str) -> String {
    template.replace("{id}", "x_1")
}

#[tokio::test]
async fn the_server_serves_exactly_the_route_table() {
    let app = spawn(Opts::default()).await;
    let templates: BTreeSet<&str> = API_ROUTES.iter().map(|(_, p)| *p).collect();
    for t in templates {
        for m in ["GET", "POST", "PUT", "PATCH", "DELETE"] {
            let served = API_ROUTES.contains(&(m, t));
            let r = read(
                app.http
                    .request(
                        Method::from_bytes(m.as_bytes()).unwrap(),
                        app.url(&concrete(t)),
                    )
                    .send()
                    .await
                    .unwrap(),
            )
            .await;
            if served {
                assert_ne!(r.status, 405, "{m} {t}");
                assert_ne!(r.error_code(), Some("route_not_found"), "{m} {t}");
            } else {
                assert_eq!(r.status, 405, "{m} {t}: {:?}", r.body);
                let allow = r.header("allow").unwrap();
                let expected: Vec<&str> = ["GET", "POST", "PUT", "DELETE"]
                    .into_iter()
                    .filter(|x| API_ROUTES.contains(&(*x, t)))
                    .collect();
                assert_eq!(allow, expected.join(", "), "{t}");
            }
        }
    }
    let r = read(
        app.http
            .get(app.url("/api/v1/plans/x/y/z"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(r.error_code(), Some("route_not_found"));
}

#[tokio::test]
async fn responses_validate_against_the_document() {
    let doc = doc();
    let app: App = spawn(Opts {
        chain: true,
        ..Opts::default()
    })
    .await;
    let served = read(
        app.http
            .get(app.url("/api/v1/openapi.json"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(served.body, doc, "the served document is the file");

    // Dashboard: nonce, sign-in, key lifecycle.
    let nonce = read(
        app.http
            .post(app.url("/api/v1/auth/nonce"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    check(&doc, "POST", "/api/v1/auth/nonce", &nonce);
    let bad = app.verify("not siwe", "0x00").await;
    check(&doc, "POST", "/api/v1/auth/session", &bad);
    let s = app.sign_in(&dev_key(MERCHANT)).await;
    let r = app
        .session_req(Method::GET, "/api/v1/auth/session", &s, false)
        .await;
    check(&doc, "GET", "/api/v1/auth/session", &r);
    let r = app
        .session_req(Method::GET, "/api/v1/auth/keys", &s, false)
        .await;
    check(&doc, "GET", "/api/v1/auth/keys", &r);
    let r = app
        .session_req(Method::POST, "/api/v1/auth/keys", &s, false)
        .await;
    assert_eq!(r.status, 403);
    check(&doc, "POST", "/api/v1/auth/keys", &r);
    let created = app
        .session_req(Method::POST, "/api/v1/auth/keys", &s, true)
        .await;
    check(&doc, "POST", "/api/v1/auth/keys", &created);
    let key = created.body["key"].as_str().unwrap().to_string();
    let r = app
        .session_req(Method::GET, "/api/v1/auth/keys", &s, false)
        .await;
    check(&doc, "GET", "/api/v1/auth/keys", &r);

    // Dashboard webhook settings (issue 10, point 9): every operation, its success and the
    // refusals a dashboard meets (no session, no CSRF token, bad input, unknown delivery).
    let dash = |m: Method, path: &str, body: Option<Value>, csrf: bool| {
        let mut rb = app
            .http
            .request(m, app.url(path))
            .header("cookie", &s.cookie);
        if csrf {
            rb = rb.header("x-csrf-token", &s.csrf);
        }
        if let Some(b) = body {
            rb = rb.json(&b);
        }
        async move { read(rb.send().await.unwrap()).await }
    };
    let w = "/dashboard/api/webhook";
    check(&doc, "GET", w, &dash(Method::GET, w, None, false).await);
    let anon = read(app.http.get(app.url(w)).send().await.unwrap()).await;
    assert_eq!(anon.status, 401);
    check(&doc, "GET", w, &anon);
    let url = "/dashboard/api/webhook/url";
    let set = dash(
        Method::PUT,
        url,
        Some(json!({"url": "http://127.0.0.1:9/hooks"})),
        true,
    )
    .await;
    assert_eq!(set.status, 200, "{:?}", set.body);
    check(&doc, "PUT", url, &set);
    let no_csrf = dash(Method::PUT, url, Some(json!({"url": null})), false).await;
    assert_eq!(no_csrf.status, 403);
    check(&doc, "PUT", url, &no_csrf);
    let bad = dash(Method::PUT, url, Some(json!({"url": "ftp://x"})), true).await;
    assert_eq!(bad.status, 400);
    check(&doc, "PUT", url, &bad);
    let secret = "/dashboard/api/webhook/secret";
    check(
        &doc,
        "GET",
        secret,
        &dash(Method::GET, secret, None, false).await,
    );
    let rotate = "/dashboard/api/webhook/secret/rotate";
    check(
        &doc,
        "POST",
        rotate,
        &dash(Method::POST, rotate, None, true).await,
    );
    check(
        &doc,
        "GET",
        secret,
        &dash(Method::GET, secret, None, false).await,
    );
    let enable = "/dashboard/api/webhook/enable";
    check(
        &doc,
        "POST",
        enable,
        &dash(Method::POST, enable, None, true).await,
    );
    let test = "/dashboard/api/webhook/test";
    let queued = dash(Method::POST, test, None, true).await;
    assert_eq!(queued.status, 202);
    check(&doc, "POST", test, &queued);
    let list = "/dashboard/api/webhook/deliveries";
    let deliveries = dash(Method::GET, &format!("{list}?limit=5"), None, false).await;
    assert_eq!(deliveries.body["data"].as_array().unwrap().len(), 1);
    check(&doc, "GET", list, &deliveries);
    check(
        &doc,
        "GET",
        list,
        &dash(Method::GET, &format!("{list}?limit=0"), None, false).await,
    );
    let retry = "/dashboard/api/webhook/deliveries/{id}/retry";
    let id = queued.body["id"].as_str().unwrap();
    let again = dash(Method::POST, &retry.replace("{id}", id), None, true).await;
    assert_eq!(again.status, 202, "{:?}", again.body);
    check(&doc, "POST", retry, &again);
    let unknown = dash(
        Method::POST,
        &retry.replace("{id}", "whd_0123456789abcdef"),
        None,
        true,
    )
    .await;
    assert_eq!(unknown.status, 404);
    check(&doc, "POST", retry, &unknown);

    // Plans and checkouts.
    let body = json!({"name":"Pro","amount":"9.99","currency":"USDC","interval":"month"});
    let plan = app.post("/api/v1/plans", &key, &body, Some("idem-1")).await;
    check(&doc, "POST", "/api/v1/plans", &plan);
    let replay = app.post("/api/v1/plans", &key, &body, Some("idem-1")).await;
    check(&doc, "POST", "/api/v1/plans", &replay);
    let conflict = app
        .post("/api/v1/plans", &key, &json!({"name":"x"}), Some("idem-1"))
        .await;
    assert_eq!(conflict.status, 409);
    check(&doc, "POST", "/api/v1/plans", &conflict);
    let invalid = app
        .post("/api/v1/plans", &key, &json!({"name":"x"}), None)
        .await;
    check(&doc, "POST", "/api/v1/plans", &invalid);
    // The validation has teeth: a float amount, a missing chain block, an undocumented
    // status and a missing X-Request-Id are each caught.
    let mut bad = Res {
        status: plan.status,
        headers: plan.headers.clone(),
        body: plan.body.clone(),
    };
    bad.body["amount"] = json!(9.99);
    assert!(!passes(&doc, "POST", "/api/v1/plans", &bad));
    let mut bad = Res {
        status: plan.status,
        headers: plan.headers.clone(),
        body: plan.body.clone(),
    };
    bad.body.as_object_mut().unwrap().remove("chain");
    assert!(!passes(&doc, "POST", "/api/v1/plans", &bad));
    let bad = Res {
        status: 202,
        headers: plan.headers.clone(),
        body: plan.body.clone(),
    };
    assert!(!passes(&doc, "POST", "/api/v1/plans", &bad));
    let mut bad = Res {
        status: plan.status,
        headers: plan.headers.clone(),
        body: plan.body.clone(),
    };
    bad.headers.remove("x-request-id");
    assert!(!passes(&doc, "POST", "/api/v1/plans", &bad));
    let plan_id = plan.body["id"].as_str().unwrap();
    check(
        &doc,
        "GET",
        "/api/v1/plans",
        &app.get("/api/v1/plans?limit=5", &key).await,
    );
    check(
        &doc,
        "GET",
        "/api/v1/plans/{id}",
        &app.get(&format!("/api/v1/plans/{plan_id}"), &key).await,
    );
    check(
        &doc,
        "GET",
        "/api/v1/plans/{id}",
        &app.get("/api/v1/plans/plan_nope", &key).await,
    );
    let prov = app
        .post(
            &format!("/api/v1/plans/{plan_id}/provision"),
            &key,
            &json!({}),
            None,
        )
        .await;
    check(&doc, "POST", "/api/v1/plans/{id}/provision", &prov);
    let co = app
        .post(
            "/api/v1/checkouts",
            &key,
            &json!({"planId": plan_id, "customerExternalId": "c-1"}),
            None,
        )
        .await;
    check(&doc, "POST", "/api/v1/checkouts", &co);
    let co404 = app
        .post(
            "/api/v1/checkouts",
            &key,
            &json!({"planId": "plan_zzz"}),
            None,
        )
        .await;
    check(&doc, "POST", "/api/v1/checkouts", &co404);

    // Index reads.
    let db = app.db().await;
    seed_cursor(&db, 500).await;
    let (sub, evt) = seed_subscription(&db, DevChain::address(MERCHANT), 1, 1, Some("c-1")).await;
    seed_subscription(&db, DevChain::address(MERCHANT_B), 2, 2, None).await;
    check(
        &doc,
        "GET",
        "/api/v1/subscriptions",
        &app.get("/api/v1/subscriptions", &key).await,
    );
    check(
        &doc,
        "GET",
        "/api/v1/subscriptions/{id}",
        &app.get(&format!("/api/v1/subscriptions/{sub}"), &key).await,
    );
    check(
        &doc,
        "GET",
        "/api/v1/subscriptions/{id}",
        &app.get("/api/v1/subscriptions/sub_2", &key).await,
    );
    check(
        &doc,
        "GET",
        "/api/v1/subscriptions",
        &app.get("/api/v1/subscriptions?status=x", &key).await,
    );
    // A retraction of the seeded subscription's creation, as a deep reorg writes it.
    db.execute(
        &format!(
            "INSERT INTO event_retractions (public_id, chain_id, contract, merchant_wallet,
                 retracted_event_id, retracted_kind, block_number, block_hash, block_time,
                 transaction_hash, log_index, subscription_id, plan_id, log_amount,
                 log_subscriber, log_period, log_attempt, log_reason, log_next_retry_at,
                 {SNAP_COLUMNS}, ancestor_block, ancestor_hash)
             SELECT 'evt_' || md5('r'), chain_id, contract, merchant_wallet, public_id, kind,
                 block_number, block_hash, block_time, transaction_hash, log_index,
                 subscription_id, plan_id, log_amount, log_subscriber, log_period, log_attempt,
                 log_reason, log_next_retry_at, {SNAP_COLUMNS}, block_number - 1, block_hash
             FROM chain_events WHERE public_id = $1"
        ),
        &[&evt],
    )
    .await
    .unwrap();
    let listed = app.get("/api/v1/events", &key).await;
    check(&doc, "GET", "/api/v1/events", &listed);
    let retractions = app.get("/api/v1/events?type=event.retracted", &key).await;
    check(&doc, "GET", "/api/v1/events", &retractions);
    let data = retractions.body["data"].as_array().unwrap();
    assert_eq!(data.len(), 1, "{}", retractions.body);
    assert_eq!(data[0]["type"], "event.retracted");
    assert_eq!(data[0]["data"]["retracted"]["eventId"], evt.as_str());
    assert_eq!(listed.body["data"][0]["id"], data[0]["id"], "newest first");
    // A renewal-at-risk observation of the same subscription, as the keeper writes it.
    db.execute(
        &format!(
            "INSERT INTO renewal_risks (public_id, chain_id, contract, merchant_wallet,
                 subscription_id, plan_id, period, reason, amount, required, available, due_at,
                 block_number, block_hash, block_time, {SNAP_COLUMNS})
             SELECT 'evt_' || md5('k'), chain_id, contract, merchant_wallet, subscription_id,
                 plan_id, 2, 'allowance', 9990000, 9990000, 0, block_time + interval '1 month',
                 block_number, block_hash, block_time, {SNAP_COLUMNS}
             FROM chain_events WHERE public_id = $1"
        ),
        &[&evt],
    )
    .await
    .unwrap();
    let risks = app
        .get("/api/v1/events?type=subscription.renewal_at_risk", &key)
        .await;
    check(&doc, "GET", "/api/v1/events", &risks);
    assert_eq!(
        risks.body["data"][0]["chain"],
        Value::Null,
        "{}",
        risks.body
    );
    assert_eq!(
        risks.body["data"][0]["data"]["renewalAtRisk"]["shortfall"], "9.99",
        "{}",
        risks.body
    );
    let listed = app.get("/api/v1/events", &key).await;
    check(&doc, "GET", "/api/v1/events", &listed);
    assert_eq!(listed.body["data"][0]["id"], risks.body["data"][0]["id"]);
    check(
        &doc,
        "GET",
        "/api/v1/events/{id}",
        &app.get(
            &format!("/api/v1/events/{}", data[0]["id"].as_str().unwrap()),
            &key,
        )
        .await,
    );
    check(
        &doc,
        "GET",
        "/api/v1/events/{id}",
        &app.get(&format!("/api/v1/events/{evt}"), &key).await,
    );
    check(
        &doc,
        "GET",
        "/api/v1/events",
        &app.get(
            &format!("/api/v1/events?startingAfter=evt_{}", "0".repeat(32)),
            &key,
        )
        .await,
    );

    // Errors of the transport: 401, 405, 413, 415 and the health document.
    check(
        &doc,
        "GET",
        "/api/v1/events",
        &app.get("/api/v1/events", "sk_live_bad").await,
    );
    let r = read(
        app.http
            .put(app.url("/api/v1/events"))
            .send()
            .await
            .unwrap(),
    )
    .await;
    check(&doc, "GET", "/api/v1/events", &Res { status: 405, ..r });
    let big = read(
        app.http
            .post(app.url("/api/v1/checkouts"))
            .bearer_auth(&key)
            .header("content-type", "application/json")
            .body(vec![b' '; 70 * 1024])
            .send()
            .await
            .unwrap(),
    )
    .await;
    check(&doc, "POST", "/api/v1/checkouts", &big);
    let r = read(
        app.http
            .post(app.url("/api/v1/checkouts"))
            .bearer_auth(&key)
            .header("content-type", "text/xml")
            .body("<x/>")
            .send()
            .await
            .unwrap(),
    )
    .await;
    check(&doc, "POST", "/api/v1/checkouts", &r);
    check(
        &doc,
        "GET",
        "/api/v1/health",
        &read(
            app.http
                .get(app.url("/api/v1/health"))
                .send()
                .await
                .unwrap(),
        )
        .await,
    );

    // Revoke and sign out.
    let r = app
        .session_req(Method::DELETE, "/api/v1/auth/keys", &s, true)
        .await;
    check(&doc, "DELETE", "/api/v1/auth/keys", &r);
    let r = app
        .session_req(Method::DELETE, "/api/v1/auth/session", &s, true)
        .await;
    check(&doc, "DELETE", "/api/v1/auth/session", &r);
    let r = app
        .session_req(Method::GET, "/api/v1/auth/session", &s, false)
        .await;
    check(&doc, "GET", "/api/v1/auth/session", &r);
}

#[tokio::test]
async fn a_429_validates_against_the_document() {
    let doc = doc();
    let app = spawn(Opts {
        key_per_sec: 1,
        key_burst: 1,
        ..Opts::default()
    })
    .await;
    let key = app.merchant_key(DevChain::address(MERCHANT)).await;
    let first = app.get("/api/v1/subscriptions", &key).await;
    check(&doc, "GET", "/api/v1/subscriptions", &first);
    let limited = app.get("/api/v1/subscriptions", &key).await;
    assert_eq!(limited.status, 429);
    check(&doc, "GET", "/api/v1/subscriptions", &limited);
}

/// Issue 10, point 9: the document's `webhooks` section (OpenAPI 3.1) has one entry per
/// event type the service sends, each the same `Event` object the API lists, with the
/// Standard Webhooks headers, and the retry schedule it states is the dispatcher's default.
#[test]
fn the_webhooks_section_documents_every_event_type_its_signature_and_the_schedule() {
    let doc = doc();
    let webhooks = doc["webhooks"].as_object().expect("a webhooks section");
    // The on-chain lifecycle types, the retraction a deep reorg produces, and the keeper's
    // observations.
    let kinds: BTreeSet<&str> = chainsub_abi::EventKind::ALL
        .iter()
        .map(|k| k.as_str())
        .chain(chainsub_store::events::UNLOGGED_KINDS)
        .chain(["webhook.test"])
        .collect();
    let documented: BTreeSet<&str> = webhooks.keys().map(String::as_str).collect();
    assert_eq!(documented, kinds, "one webhook entry per event type");
    let schedule = chainsub_webhooks::schedule::DEFAULT_SCHEDULE.replace(',', ", ");
    for (kind, entry) in webhooks {
        let post = &entry["post"];
        let body = if kind == "webhook.test" {
            "#/components/schemas/TestEvent"
        } else {
            "#/components/schemas/Event"
        };
        assert_eq!(
            post["requestBody"]["content"]["application/json"]["schema"]["$ref"], body,
            "{kind}: the body is the event object /events lists (the test event's own)"
        );
        let headers: BTreeSet<&str> = post["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|p| p["in"] == "header")
            .map(|p| p["name"].as_str().unwrap())
            .collect();
        for h in ["webhook-id", "webhook-timestamp", "webhook-signature"] {
            assert!(headers.contains(h), "{kind}: header {h}");
        }
        let prose = post["description"].as_str().unwrap();
        assert!(
            prose.contains(&schedule),
            "{kind}: the documented schedule is the code's ({schedule})"
        );
        assert!(post["responses"]["410"].is_object(), "{kind}: 410 disables");
    }
}

/// The error codes are one list (`chainsub_api::http::codes::Code`): the OpenAPI document's
/// `Error.code` enum and description and the merchant docs' table (`docs/errors.md`) are
/// rendered from it. `CHAINSUB_WRITE_GENERATED=1` rewrites both.
#[test]
fn error_codes_are_one_list_rendered_into_the_openapi_document_and_the_docs() {
    use chainsub_api::http::codes::{Code, markdown_table};
    let write = std::env::var_os("CHAINSUB_WRITE_GENERATED").is_some();
    let root = chainsub_tests::workspace_root();
    let table = markdown_table();

    let mut d = doc();
    let code = d
        .pointer_mut("/components/schemas/Error/properties/error/properties/code")
        .expect("Error.code in the document");
    let codes: Vec<&str> = Code::ALL.iter().map(|c| c.as_str()).collect();
    let want = json!({
        "type": "string",
        "enum": codes,
        "description": format!(
            "Machine-readable code: branch on it, never on the message. Every code, with its \
             status and meaning:\n\n{table}"
        ),
    });
    let docs_path = root.join("docs/errors.md");
    let docs = std::fs::read_to_string(&docs_path).unwrap();
    let (head, rest) = docs
        .split_once("<!-- codes:begin -->\n")
        .expect("begin marker");
    let (_, tail) = rest.split_once("<!-- codes:end -->").expect("end marker");
    let want_docs = format!("{head}<!-- codes:begin -->\n{table}<!-- codes:end -->{tail}");
    if write {
        let path = root.join("api/openapi.json");
        let raw = std::fs::read_to_string(&path).unwrap();
        std::fs::write(&path, replace_error_code(&raw, &want)).unwrap();
        std::fs::write(&docs_path, want_docs).unwrap();
        return;
    }
    assert_eq!(
        *code, want,
        "api/openapi.json's Error.code is not the list: run with CHAINSUB_WRITE_GENERATED=1"
    );
    assert_eq!(
        docs, want_docs,
        "docs/errors.md's table is not the list: run with CHAINSUB_WRITE_GENERATED=1"
    );
}

/// `raw` (the document's text) with the `Error` schema's `code` object replaced by `want`,
/// everything else byte for byte as it was.
fn replace_error_code(raw: &str, want: &Value) -> String {
    let schema = raw.find("\"Error\": {").expect("the Error schema");
    let key = schema + raw[schema..].find("\"code\": {").expect("its code");
    let open = key + raw[key..].find('{').unwrap();
    let (mut depth, mut in_str, mut escaped, mut end) = (0usize, false, false, open);
    for (i, ch) in raw[open..].char_indices() {
        match ch {
            _ if escaped => escaped = false,
            '\\' if in_str => escaped = true,
            '"' => in_str = !in_str,
            '{' if !in_str => depth += 1,
            '}' if !in_str => {
                depth -= 1;
                if depth == 0 {
                    end = open + i + 1;
                    break;
                }
            }
            _ => {}
        }
    }
    let line_start = raw[..key].rfind('\n').map_or(0, |i| i + 1);
    let indent = &raw[line_start..key];
    let rendered = serde_json::to_string_pretty(want)
        .unwrap()
        .replace('\n', &format!("\n{indent}"));
    format!("{}{rendered}{}", &raw[..open], &raw[end..])
}
