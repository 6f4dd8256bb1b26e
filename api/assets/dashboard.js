// Chainsub dashboard (/dashboard/developers): Sign-In with Ethereum (EIP-4361) through
// window.ethereum, the API key (plaintext shown once, from the POST answer only), webhook
// settings and recent deliveries. State-changing calls send the session's CSRF token.
"use strict";

(function () {
  const settings = JSON.parse(document.getElementById("dashboard-settings").textContent);
  const statusEl = document.getElementById("status");
  const $ = (id) => document.getElementById(id);

  function say(message) {
    statusEl.textContent = message;
  }

  // fetch() against our JSON endpoints; throws an Error carrying the API's message.
  async function call(method, path, body) {
    const headers = { accept: "application/json" };
    if (method !== "GET" && settings.csrfToken) headers[settings.csrfHeader] = settings.csrfToken;
    if (body !== undefined) headers["content-type"] = "application/json";
    const res = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: "same-origin",
    });
    const text = await res.text();
    let json = null;
    try {
      json = text ? JSON.parse(text) : null;
    } catch (_) {
      // Not JSON (e.g. a proxy's error page): report the status below.
    }
    if (!res.ok || json === null && text) {
      const e = new Error(json && json.error ? json.error.message : "HTTP " + res.status);
      e.status = res.status;
      throw e;
    }
    return json;
  }

  function guard(what, fn) {
    return async (ev) => {
      if (ev) ev.preventDefault();
      try {
        await fn(ev);
      } catch (e) {
        say(what + " failed: " + e.message);
      }
    };
  }

  // ------------------------------------------------------------------ sign-in

  const { hexUtf8 } = window.ChainsubWallet;

  function siweMessage(n, address) {
    return n.domain + " wants you to sign in with your Ethereum account:\n" +
      address + "\n\n" +
      n.statement + "\n\n" +
      "URI: " + n.uri + "\n" +
      "Version: " + n.version + "\n" +
      "Chain ID: " + n.chainId + "\n" +
      "Nonce: " + n.nonce + "\n" +
      "Issued At: " + new Date().toISOString() + "\n" +
      "Expiration Time: " + n.expiresAt;
  }

  async function signIn() {
    const eth = window.ethereum;
    if (!eth || typeof eth.request !== "function") {
      say(window.ChainsubWallet.NO_WALLET);
      return;
    }
    say("Waiting for your wallet…");
    let address;
    try {
      const accounts = await eth.request({ method: "eth_requestAccounts" });
      address = accounts[0];
      const n = await call("POST", "/api/v1/auth/nonce");
      const message = siweMessage(n, address);
      say("Sign the message in your wallet to sign in…");
      const signature = await eth.request({ method: "personal_sign", params: [hexUtf8(message), address] });
      await call("POST", "/api/v1/auth/session", { message, signature });
    } catch (e) {
      say(e && e.code === 4001 ? "You rejected the request in your wallet. You are not signed in." : "Sign-in failed: " + e.message);
      return;
    }
    say("Signed in. Loading your dashboard…");
    location.reload();
  }

  if (!settings.signedIn) {
    $("signin").addEventListener("click", signIn);
    return;
  }

  $("signout").addEventListener("click", guard("Sign-out", async () => {
    await call("DELETE", "/api/v1/auth/session");
    location.reload();
  }));

  // ------------------------------------------------------------------ API key

  function keySummary(status) {
    const k = status && status.key;
    if (!k) return "No API key. Generate one to call the API from your backend.";
    return k.prefix + "…" + k.last4 + " · created " + k.createdAt + " · " +
      (k.lastUsedAt ? "last used " + k.lastUsedAt : "never used");
  }

  function showKeyStatus(status) {
    const has = !!(status && status.active);
    $("key-status").textContent = keySummary(status);
    $("key-status").dataset.hasKey = String(has);
    $("key-generate").hidden = has;
    $("key-rotate").hidden = !has;
    $("key-revoke").hidden = !has;
  }

  let pendingKeyAction = null;

  function askKey(action, text) {
    pendingKeyAction = action;
    $("key-confirm-text").textContent = text;
    $("key-confirm").hidden = false;
    $("key-confirm-yes").textContent = action === "rotate" ? "Rotate now" : "Revoke now";
    $("key-confirm-yes").focus();
  }

  async function issueKey() {
    const r = await call("POST", "/api/v1/auth/keys");
    showKeyStatus(r.status);
    $("key-once").hidden = false;
    $("key-plaintext").value = r.key;
    $("key-plaintext").focus();
    $("key-plaintext").select();
    say(r.rotated ? "Key rotated. The previous key no longer works. Copy the new key now." : "Key created. Copy it now: it will not be shown again.");
  }

  $("key-generate").addEventListener("click", guard("Creating the key", issueKey));
  $("key-rotate").addEventListener("click", () =>
    askKey("rotate", "Rotating creates a new key and stops the current key at once. Your backend must switch to the new key."));
  $("key-revoke").addEventListener("click", () =>
    askKey("revoke", "Revoking stops the current key at once and leaves you without a key."));
  $("key-confirm-no").addEventListener("click", () => {
    $("key-confirm").hidden = true;
    pendingKeyAction = null;
    say("Cancelled.");
  });
  $("key-confirm-yes").addEventListener("click", guard("Changing the key", async () => {
    const action = pendingKeyAction;
    $("key-confirm").hidden = true;
    pendingKeyAction = null;
    if (action === "rotate") {
      await issueKey();
    } else if (action === "revoke") {
      const status = await call("DELETE", "/api/v1/auth/keys");
      $("key-once").hidden = true;
      $("key-plaintext").value = "";
      showKeyStatus(status);
      say("Key revoked. API calls with it now fail.");
    }
  }));
  $("key-copy").addEventListener("click", guard("Copying", async () => {
    await navigator.clipboard.writeText($("key-plaintext").value);
    say("Copied.");
  }));

  // ------------------------------------------------------------------ name shown to customers

  $("name-form").addEventListener("submit", guard("Saving the name", async () => {
    const name = $("display-name").value.trim();
    const p = await call("PUT", "/dashboard/api/merchant/display-name", { displayName: name === "" ? null : name });
    $("display-name").value = p.displayName || "";
    say(p.displayName ? "Customers now see " + p.displayName + "." : "Customers now see your code " + p.code + ".");
  }));

  // ------------------------------------------------------------------ webhooks

  async function saveUrl(url) {
    const ep = await call("PUT", "/dashboard/api/webhook/url", { url });
    $("webhook-url").value = ep.url || "";
    say(ep.url ? "Webhook URL saved." : "Webhook URL removed; no events will be sent.");
  }

  $("webhook-form").addEventListener("submit", guard("Saving the URL", () => {
    const url = $("webhook-url").value.trim();
    return saveUrl(url === "" ? null : url);
  }));
  $("webhook-clear").addEventListener("click", guard("Removing the URL", () => saveUrl(null)));
  if ($("webhook-enable")) {
    $("webhook-enable").addEventListener("click", guard("Resuming deliveries", async () => {
      await call("POST", "/dashboard/api/webhook/enable");
      $("webhook-disabled").hidden = true;
      say("Deliveries resumed.");
    }));
  }

  function showSecret(secret, previousText) {
    $("secret-box").hidden = false;
    $("secret-value").value = secret || "(none yet: rotate to create one)";
    $("secret-previous").textContent = previousText || "";
    // After a leak, the previous secret can stop signing at once instead of at its expiry.
    $("secret-revoke-previous").hidden = !previousText;
  }

  $("secret-reveal").addEventListener("click", guard("Revealing the secret", async () => {
    const s = await call("GET", "/dashboard/api/webhook/secret");
    const prev = (s.previous || []).map((p) => "Previous secret still valid until " + p.expiresAt + ".").join(" ");
    showSecret(s.secret, prev);
    say("Secret revealed.");
  }));
  $("secret-rotate").addEventListener("click", guard("Rotating the secret", async () => {
    const s = await call("POST", "/dashboard/api/webhook/secret/rotate");
    showSecret(s.secret, "The previous secret keeps signing until " + s.previousExpiresAt + ".");
    say("Secret rotated.");
  }));
  $("secret-revoke-previous").addEventListener("click", guard("Ending the previous secret", async () => {
    const s = await call("POST", "/dashboard/api/webhook/secret/revoke-previous");
    showSecret(s.secret, "");
    say("The previous secret no longer signs.");
  }));
  $("webhook-test").addEventListener("click", guard("Sending a test event", async () => {
    const d = await call("POST", "/dashboard/api/webhook/test");
    say("Test event queued (" + d.eventId + ").");
    await loadDeliveries();
  }));

  function cell(tr, text) {
    const td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    tr.appendChild(td);
    return td;
  }

  // `2026-11-29 14:03 UTC`, the exact time on hover.
  function when(iso) {
    const t = document.createElement("time");
    t.dateTime = iso;
    t.title = iso;
    t.textContent = new Date(iso).toISOString().slice(0, 16).replace("T", " ") + " UTC";
    return t;
  }

  async function loadDeliveries() {
    const body = document.querySelector("#deliveries tbody");
    let list;
    try {
      list = await call("GET", "/dashboard/api/webhook/deliveries?limit=20");
    } catch (e) {
      body.textContent = "";
      const tr = document.createElement("tr");
      cell(tr, "Deliveries are not available: " + e.message).colSpan = 7;
      body.appendChild(tr);
      return;
    }
    body.textContent = "";
    if (!list.data.length) {
      const tr = document.createElement("tr");
      const td = cell(tr, "No deliveries yet.");
      td.colSpan = 7;
      td.className = "muted";
      body.appendChild(tr);
      return;
    }
    for (const d of list.data) {
      const tr = document.createElement("tr");
      tr.dataset.delivery = d.id;
      cell(tr, d.eventId).className = "mono";
      cell(tr, d.eventType);
      const st = cell(tr, d.status);
      if (d.heldBy) {
        st.textContent = "waiting for the subscription's earlier event " + d.heldBy;
        st.dataset.heldBy = d.heldBy;
      }
      cell(tr, d.attemptCount);
      cell(tr, d.lastError || "");
      const created = cell(tr, "");
      created.appendChild(when(d.createdAt));
      const td = cell(tr, "");
      const b = document.createElement("button");
      b.type = "button";
      b.textContent = "Retry";
      b.setAttribute("aria-label", "Retry delivery " + d.id);
      b.addEventListener("click", guard("Retrying", async () => {
        await call("POST", "/dashboard/api/webhook/deliveries/" + encodeURIComponent(d.id) + "/retry");
        say("Delivery " + d.id + " queued again.");
        await loadDeliveries();
      }));
      td.appendChild(b);
      body.appendChild(tr);
    }
  }

  $("deliveries-refresh").addEventListener("click", guard("Refreshing", loadDeliveries));
  loadDeliveries();
})();
