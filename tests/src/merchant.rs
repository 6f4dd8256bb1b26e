//! A merchant talking to a running `api` over real HTTP, the way the spec's typical call
//! sequence goes: Sign-In with Ethereum through the API's own nonce and session endpoints
//! (signed in-process with alloy, exactly as a wallet's `personal_sign` would), the API key
//! from that session, the webhook URL set in the dashboard, then plans, checkouts,
//! subscriptions and events with the key. A customer's checkout transactions come from the
//! checkout page's own `/tx` endpoint and are sent from the customer's wallet.

use std::time::Duration;

use alloy::network::TransactionBuilder;
use alloy::primitives::{Address, Bytes};
use alloy::providers::{DynProvider, Provider};
use alloy::rpc::types::{TransactionReceipt, TransactionRequest};
use alloy::signers::Signer;
use alloy::signers::local::PrivateKeySigner;
use anyhow::{Context, Result, anyhow, bail, ensure};
use serde_json::{Value, json};

/// A dashboard session: the cookie and the CSRF token state-changing calls need.
#[derive(Debug, Clone)]
pub struct Session {
    pub cookie: String,
    pub csrf: String,
    /// The session object the API returned (`merchant`, `expiresAt`, ...).
    pub body: Value,
}

/// A response read whole: status, headers, and the body as JSON (`Null` when empty, a JSON
/// string when it is not JSON).
#[derive(Debug)]
pub struct Res {
    pub status: u16,
    pub headers: reqwest::header::HeaderMap,
    pub body: Value,
}

impl Res {
    /// A header's value as text.
    pub fn header(&self, name: &str) -> Option<String> {
        self.headers
            .get(name)
            .and_then(|v| v.to_str().ok())
            .map(str::to_string)
    }
    /// `error.param` of an error body.
    pub fn error_param(&self) -> Option<&str> {
        self.body["error"]["param"].as_str()
    }
    /// `error.code` of an error body.
    pub fn error_code(&self) -> Option<&str> {
        self.body["error"]["code"].as_str()
    }
}

/// Reads a whole response into a [`Res`].
pub async fn read(resp: reqwest::Response) -> Result<Res> {
    let status = resp.status().as_u16();
    let headers = resp.headers().clone();
    let text = resp.text().await?;
    let body = if text.is_empty() {
        Value::Null
    } else {
        serde_json::from_str(&text).unwrap_or(Value::String(text))
    };
    Ok(Res {
        status,
        headers,
        body,
    })
}

/// HTTP client for one API base URL: the one API client of the tests (the API crate's
/// in-process tests and the whole-stack tests both talk through it).
#[derive(Debug, Clone)]
pub struct ApiClient {
    pub base: String,
    http: reqwest::Client,
}

/// The EIP-4361 text a wallet signs, built from the API's nonce answer (domain, uri,
/// chainId, version, statement, nonce), issued now and valid for five minutes.
pub fn siwe_text(nonce: &Value, address: Address) -> Result<String> {
    let field = |k: &str| -> Result<String> {
        match &nonce[k] {
            Value::String(s) => Ok(s.clone()),
            Value::Number(n) => Ok(n.to_string()),
            _ => bail!("nonce answer lacks `{k}`: {nonce}"),
        }
    };
    let now = chrono::Utc::now();
    let fmt =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    Ok(format!(
        "{domain} wants you to sign in with your Ethereum account:\n{address}\n\n{statement}\n\n\
         URI: {uri}\nVersion: {version}\nChain ID: {chain}\nNonce: {n}\nIssued At: {issued}\n\
         Expiration Time: {expires}",
        domain = field("domain")?,
        address = address.to_checksum(None),
        statement = field("statement")?,
        uri = field("uri")?,
        version = field("version")?,
        chain = field("chainId")?,
        n = field("nonce")?,
        issued = fmt(now),
        expires = fmt(now + chrono::Duration::minutes(5)),
    ))
}

impl ApiClient {
    /// A client for `base` (e.g. `http://127.0.0.1:8080`).
    pub fn new(base: &str) -> Self {
        Self {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(Duration::from_secs(60))
                .build()
                .expect("reqwest client"),
        }
    }

    /// `path` on this API (a full `http…` URL is taken as is).
    pub fn url(&self, path: &str) -> String {
        if path.starts_with("http") {
            path.to_string()
        } else {
            format!("{}{path}", self.base)
        }
    }

    /// The underlying HTTP client, for requests the helpers below do not build (odd
    /// methods, raw headers, malformed bodies).
    pub fn http(&self) -> &reqwest::Client {
        &self.http
    }

    /// A request to `path` on this API.
    pub fn request(&self, method: reqwest::Method, path: &str) -> reqwest::RequestBuilder {
        self.http.request(method, self.url(path))
    }

    /// Sends `rb` and reads the whole response.
    pub async fn send(&self, rb: reqwest::RequestBuilder) -> Result<Res> {
        read(rb.send().await?).await
    }

    /// `GET` with the API key (bearer); the whole response.
    pub async fn get_res(&self, path: &str, key: &str) -> Result<Res> {
        self.send(self.request(reqwest::Method::GET, path).bearer_auth(key))
            .await
    }

    /// `POST` of a JSON body with the API key and, when given, an `Idempotency-Key`.
    pub async fn post_res(
        &self,
        path: &str,
        key: &str,
        body: &Value,
        idempotency_key: Option<&str>,
    ) -> Result<Res> {
        let mut rb = self
            .request(reqwest::Method::POST, path)
            .bearer_auth(key)
            .json(body);
        if let Some(k) = idempotency_key {
            rb = rb.header("idempotency-key", k);
        }
        self.send(rb).await
    }

    /// A dashboard-session request (the session cookie; the CSRF header when `csrf`).
    pub async fn session_res(
        &self,
        method: reqwest::Method,
        path: &str,
        s: &Session,
        csrf: bool,
        body: Option<&Value>,
    ) -> Result<Res> {
        let mut rb = self.request(method, path).header("cookie", &s.cookie);
        if csrf {
            rb = rb.header("x-csrf-token", &s.csrf);
        }
        if let Some(b) = body {
            rb = rb.json(b);
        }
        self.send(rb).await
    }

    /// Status and JSON body (Null when empty).
    async fn read(resp: reqwest::Response) -> Result<(u16, Value)> {
        let r = read(resp).await?;
        Ok((r.status, r.body))
    }

    /// `GET /api/v1/health` answers 200.
    pub async fn healthy(&self) -> bool {
        match self.http.get(self.url("/api/v1/health")).send().await {
            Ok(r) => r.status().is_success(),
            Err(_) => false,
        }
    }

    /// The API has started: `GET /api/v1/health` is answered, and not with the 503
    /// `starting` it gives while start-up waits for its database (healthy or not).
    pub async fn started(&self) -> bool {
        match self.health().await {
            Ok((_, body)) => body["error"]["code"] != "starting",
            Err(_) => false,
        }
    }

    /// `GET /api/v1/health` (no auth): status and body.
    pub async fn health(&self) -> Result<(u16, Value)> {
        Self::read(self.http.get(self.url("/api/v1/health")).send().await?).await
    }

    /// Waits (up to `secs`) until the API's health says the index reached block `target`.
    pub async fn wait_indexed_to(&self, target: u64, secs: u64) -> Result<()> {
        wait_for("the index to reach the head", secs, || async {
            let (_, h) = self.health().await?;
            Ok(h["chain"]["indexedBlock"]
                .as_u64()
                .is_some_and(|b| b >= target)
                .then_some(()))
        })
        .await
    }

    /// Every event of the merchant of `key`, following the cursor, from pages that each
    /// report (`Chainsub-Indexed-Block`) an index at `indexed_at_least` or later: a page read
    /// from a standby a block or two behind starts the listing again.
    pub async fn all_events(&self, key: &str, indexed_at_least: u64) -> Result<Vec<Value>> {
        'listing: loop {
            let mut out = Vec::new();
            let mut path = "/api/v1/events?limit=100".to_string();
            loop {
                let page = self.get_res(&path, key).await?;
                if page.status != 200 {
                    return Err(anyhow!("GET {path}: {} {}", page.status, page.body));
                }
                let height: u64 = page
                    .header("chainsub-indexed-block")
                    .and_then(|h| h.parse().ok())
                    .unwrap_or(0);
                if height < indexed_at_least {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue 'listing;
                }
                let data = page.body["data"].as_array().cloned().unwrap_or_default();
                let last = data
                    .last()
                    .and_then(|e| e["id"].as_str())
                    .map(str::to_string);
                out.extend(data);
                match (page.body["hasMore"].as_bool(), last) {
                    (Some(true), Some(id)) => {
                        path = format!("/api/v1/events?limit=100&startingAfter={id}")
                    }
                    _ => return Ok(out),
                }
            }
        }
    }

    /// Signs in to the dashboard with `signer` (SIWE): nonce, `personal_sign`, session.
    pub async fn sign_in(&self, signer: &PrivateKeySigner) -> Result<Session> {
        let (status, nonce) = Self::read(
            self.http
                .post(self.url("/api/v1/auth/nonce"))
                .send()
                .await?,
        )
        .await?;
        ensure!(status == 201, "POST /auth/nonce: {status} {nonce}");
        let text = siwe_text(&nonce, signer.address())?;
        let sig = signer.sign_message(text.as_bytes()).await?;
        let signature = format!("0x{}", alloy::hex::encode(sig.as_bytes()));
        let resp = self
            .http
            .post(self.url("/api/v1/auth/session"))
            .json(&json!({ "message": text, "signature": signature }))
            .send()
            .await?;
        let set_cookie = resp
            .headers()
            .get("set-cookie")
            .and_then(|v| v.to_str().ok())
            .map(str::to_string);
        let (status, body) = Self::read(resp).await?;
        ensure!(status == 200, "POST /auth/session: {status} {body}");
        let cookie = set_cookie
            .ok_or_else(|| anyhow!("sign-in set no cookie"))?
            .split(';')
            .next()
            .unwrap_or_default()
            .to_string();
        let csrf = body["csrfToken"]
            .as_str()
            .ok_or_else(|| anyhow!("session without csrfToken: {body}"))?
            .to_string();
        Ok(Session { cookie, csrf, body })
    }

    /// A dashboard-session call (`body` None sends none); returns status and body.
    pub async fn session_call(
        &self,
        method: reqwest::Method,
        path: &str,
        s: &Session,
        body: Option<&Value>,
    ) -> Result<(u16, Value)> {
        let r = self.session_res(method, path, s, true, body).await?;
        Ok((r.status, r.body))
    }

    /// `POST /api/v1/auth/keys` in the session: the new plaintext key.
    pub async fn create_key(&self, s: &Session) -> Result<String> {
        let (status, body) = self
            .session_call(
                reqwest::Method::POST,
                "/api/v1/auth/keys",
                s,
                Some(&json!({})),
            )
            .await?;
        ensure!(status == 201, "POST /auth/keys: {status} {body}");
        Ok(body["key"]
            .as_str()
            .ok_or_else(|| anyhow!("no key in {body}"))?
            .to_string())
    }

    /// Sets the webhook URL in the dashboard and returns the signing secret (`whsec_…`).
    pub async fn set_webhook(&self, s: &Session, url: &str) -> Result<String> {
        let (status, body) = self
            .session_call(
                reqwest::Method::PUT,
                "/dashboard/api/webhook/url",
                s,
                Some(&json!({ "url": url })),
            )
            .await?;
        ensure!(status == 200, "PUT webhook url: {status} {body}");
        let (status, body) = self
            .session_call(
                reqwest::Method::GET,
                "/dashboard/api/webhook/secret",
                s,
                None,
            )
            .await?;
        ensure!(status == 200, "GET webhook secret: {status} {body}");
        Ok(body["secret"]
            .as_str()
            .ok_or_else(|| anyhow!("no secret in {body}"))?
            .to_string())
    }

    /// `GET` with the API key; status and body.
    pub async fn get(&self, path: &str, key: &str) -> Result<(u16, Value)> {
        let r = self.get_res(path, key).await?;
        Ok((r.status, r.body))
    }

    /// `GET` with the API key that must answer 200.
    pub async fn get_ok(&self, path: &str, key: &str) -> Result<Value> {
        let (status, body) = self.get(path, key).await?;
        ensure!(status == 200, "GET {path}: {status} {body}");
        Ok(body)
    }

    /// `POST` with the API key and an `Idempotency-Key`; status and body.
    pub async fn post(&self, path: &str, key: &str, body: &Value) -> Result<(u16, Value)> {
        let idem = format!("{}-{}", path.replace('/', "_"), rand_suffix());
        let r = self.post_res(path, key, body, Some(&idem)).await?;
        Ok((r.status, r.body))
    }

    /// `POST /api/v1/plans`, then waits until the plan is `active` (provisioned on chain).
    pub async fn create_plan(&self, key: &str, name: &str, amount: &str) -> Result<Value> {
        self.create_plan_with(
            key,
            &json!({"name": name, "amount": amount, "currency": "USDC", "interval": "month"}),
        )
        .await
    }

    /// [`ApiClient::create_plan`] with the whole request body (e.g. with `trialDays`).
    pub async fn create_plan_with(&self, key: &str, body: &Value) -> Result<Value> {
        let (status, plan) = self.post("/api/v1/plans", key, body).await?;
        ensure!(
            status == 201 || status == 202,
            "POST /plans: {status} {plan}"
        );
        let id = plan["id"].as_str().unwrap_or_default().to_string();
        let mut plan = plan;
        for _ in 0..600 {
            if plan["status"] == "active" {
                return Ok(plan);
            }
            ensure!(
                plan["status"] != "failed",
                "plan provisioning failed: {plan}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
            let list = self.get_ok("/api/v1/plans?limit=100", key).await?;
            plan = list["data"]
                .as_array()
                .and_then(|d| d.iter().find(|p| p["id"] == id.as_str()).cloned())
                .ok_or_else(|| anyhow!("plan {id} not listed"))?;
        }
        bail!("plan {id} never became active: {plan}")
    }

    /// `POST /api/v1/checkouts`; the checkout object.
    pub async fn create_checkout(&self, key: &str, plan_id: &str, customer: &str) -> Result<Value> {
        let (status, body) = self
            .post(
                "/api/v1/checkouts",
                key,
                &json!({"planId": plan_id, "customerExternalId": customer}),
            )
            .await?;
        ensure!(status == 201, "POST /checkouts: {status} {body}");
        Ok(body)
    }

    /// The transactions the checkout page would ask `from`'s wallet to send, from its
    /// `/tx` endpoint (`{steps: [{step, label, tx}]}`), the two-transaction way (`approve`
    /// when the allowance is short, then `subscribe`: `permit=off`). While the plan is not
    /// indexed with `CONFIRMATIONS` yet (409 `plan_not_active`) it asks again for up to a
    /// minute, as a customer pressing the page's "Check again" would.
    pub async fn checkout_transactions(&self, checkout_url: &str, from: Address) -> Result<Value> {
        self.checkout_steps(checkout_url, from, &[("permit", "off")])
            .await
    }

    /// `/tx` of a checkout link for `from` with `extra` query pairs.
    pub async fn checkout_steps(
        &self,
        checkout_url: &str,
        from: Address,
        extra: &[(&str, &str)],
    ) -> Result<Value> {
        let mut url = url::Url::parse(checkout_url).context("checkout url")?;
        let path = format!("{}/tx", url.path());
        url.set_path(&path);
        url.query_pairs_mut()
            .append_pair("from", &from.to_checksum(None))
            .extend_pairs(extra);
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let (status, body) = Self::read(self.http.get(url.clone()).send().await?).await?;
            if status == 409
                && body["error"]["code"] == "plan_not_active"
                && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
            ensure!(status == 200, "GET checkout tx: {status} {body}");
            return Ok(body);
        }
    }

    /// Subscribes `from` through the checkout link as the page does with a wallet that signs
    /// typed data: when the `/tx` endpoint asks for a permit (the allowance is short), signs
    /// it (`eth_signTypedData_v4`, on the node: anvil holds the dev keys) and asks again with
    /// the signature; then sends every transaction step, in order, from the customer's
    /// wallet. Returns the receipts (one `subscribe` — with the permit inside — where the
    /// token has `permit`).
    pub async fn subscribe_via_checkout(
        &self,
        checkout_url: &str,
        wallet: &DynProvider,
        from: Address,
    ) -> Result<Vec<(String, TransactionReceipt)>> {
        let mut plan = self.checkout_steps(checkout_url, from, &[]).await?;
        if let Some(permit) = plan["steps"]
            .as_array()
            .and_then(|s| s.iter().find(|s| s["step"] == "permit"))
            .cloned()
        {
            let signature: String = wallet
                .raw_request(
                    "eth_signTypedData_v4".into(),
                    (from, permit["typedData"].clone()),
                )
                .await
                .context("eth_signTypedData_v4")?;
            let field = |k: &str| permit["permit"][k].as_str().unwrap_or_default().to_string();
            let (value, deadline) = (field("value"), field("deadline"));
            plan = self
                .checkout_steps(
                    checkout_url,
                    from,
                    &[
                        ("permitValue", &value),
                        ("permitDeadline", &deadline),
                        ("permitSignature", &signature),
                    ],
                )
                .await?;
        }
        let steps = plan["steps"]
            .as_array()
            .ok_or_else(|| anyhow!("no steps in {plan}"))?;
        let mut receipts = Vec::new();
        for step in steps {
            let name = step["step"].as_str().unwrap_or("tx").to_string();
            let receipt = send_tx_request(wallet, &step["tx"])
                .await
                .with_context(|| format!("checkout step {name}"))?;
            receipts.push((name, receipt));
        }
        Ok(receipts)
    }

    /// What the self-service page does when the customer cancels: asks
    /// `/account/cancel-tx` for the call and sends it from the customer's wallet.
    pub async fn cancel_via_account_page(
        &self,
        wallet: &DynProvider,
        from: Address,
        onchain_id: u64,
        at_period_end: bool,
    ) -> Result<TransactionReceipt> {
        let url = format!(
            "{}/account/cancel-tx?from={from}&subscription={onchain_id}&atPeriodEnd={at_period_end}",
            self.base
        );
        let (status, body) = Self::read(self.http.get(url).send().await?).await?;
        ensure!(status == 200, "GET /account/cancel-tx: {status} {body}");
        send_tx_request(wallet, &body["tx"]).await
    }

    /// The self-service page's list of `wallet`'s subscriptions, as the page gets it: the
    /// wallet signs the server's challenge (`personal_sign`), the list request carries it.
    pub async fn account_subscriptions(&self, wallet: &PrivateKeySigner) -> Result<Value> {
        let (issued_at, signature) = self.account_proof(wallet).await?;
        let url = format!(
            "{}/account/subscriptions?wallet={}",
            self.base,
            wallet.address()
        );
        let req = self
            .http
            .get(url)
            .header("x-wallet-proof-issued-at", issued_at)
            .header("x-wallet-proof-signature", signature);
        let (status, body) = Self::read(req.send().await?).await?;
        ensure!(status == 200, "GET /account/subscriptions: {status} {body}");
        Ok(body)
    }

    /// `wallet`'s proof for the self-service list: (issuedAt, signature) of the challenge.
    pub async fn account_proof(&self, wallet: &PrivateKeySigner) -> Result<(String, String)> {
        let url = format!(
            "{}/account/challenge?wallet={}",
            self.base,
            wallet.address()
        );
        let (status, c) = Self::read(self.http.get(url).send().await?).await?;
        ensure!(status == 200, "GET /account/challenge: {status} {c}");
        let message = c["message"]
            .as_str()
            .ok_or_else(|| anyhow!("no message: {c}"))?;
        let signature = wallet.sign_message(message.as_bytes()).await?;
        Ok((
            c["issuedAt"].as_str().unwrap_or_default().to_string(),
            format!("0x{}", alloy::primitives::hex::encode(signature.as_bytes())),
        ))
    }
}

/// Sends an EIP-1193 transaction request the pages hand out (`from`, `to`, `data`) as the
/// wallet would, and waits for a successful receipt.
pub async fn send_tx_request(wallet: &DynProvider, tx: &Value) -> Result<TransactionReceipt> {
    let field = |k: &str| tx[k].as_str().ok_or_else(|| anyhow!("tx lacks {k}: {tx}"));
    let req = TransactionRequest::default()
        .with_from(field("from")?.parse()?)
        .with_to(field("to")?.parse()?)
        .with_input(field("data")?.parse::<Bytes>()?);
    let receipt = wallet
        .send_transaction(req)
        .await?
        .get_receipt()
        .await
        .context("tx receipt")?;
    ensure!(
        receipt.status(),
        "transaction {} reverted",
        receipt.transaction_hash
    );
    Ok(receipt)
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or_default();
    format!("{nanos}-{}", N.fetch_add(1, Ordering::Relaxed))
}

/// Polls `check` every 100 ms until it yields `Some`, for at most `secs` seconds.
pub async fn wait_for<T, F, Fut>(what: &str, secs: u64, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if tokio::time::Instant::now() > deadline {
            bail!("timed out after {secs}s waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
