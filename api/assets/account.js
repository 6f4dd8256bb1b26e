// Chainsub customer self-service page: the wallet signs a challenge (personal_sign, no
// transaction) to show it is the customer's, the page lists its subscriptions (GET
// /account/subscriptions with that proof), changes their plan and cancels them with a
// transaction the wallet sends. The server encodes every transaction (GET /account/cancel-tx,
// /account/plan-change-tx, after checking the chain), so no ABI library is needed. States are shown on #account[data-state] and
// announced in #status.
"use strict";

(function () {
  const { ethereum, short, sleep, receipt, hexUtf8 } = window.ChainsubWallet;
  const onRightChain = () => window.ChainsubWallet.onRightChain(settings.chainId);
  const settings = JSON.parse(document.getElementById("account-settings").textContent);
  const card = document.getElementById("account");
  const statusEl = document.getElementById("status");
  const listEl = document.getElementById("subscriptions");
  const walletEl = document.getElementById("wallet");
  const btn = {
    connect: document.getElementById("connect"),
    switch: document.getElementById("switch"),
    refresh: document.getElementById("refresh"),
  };
  let account = null;
  let subs = [];
  let busy = false; // a sign-in, plan change or cancel flow runs: its buttons are off, wallet events wait
  let walletMoved = false; // the wallet switched account or chain during a flow
  let proof = null; // {account, issuedAt, signature, expiresAt} of the last signed challenge
  let seq = 0; // the latest list request: older answers are dropped
  const RECEIPT_TIMEOUT_MS = 10 * 60 * 1000;

  function show(state, message, buttons) {
    card.dataset.state = state;
    statusEl.textContent = message;
    for (const [name, el] of Object.entries(btn)) el.hidden = !buttons.includes(name);
    for (const b of listEl.querySelectorAll("button")) b.disabled = busy;
  }

  function el(tag, text, attrs) {
    const e = document.createElement(tag);
    if (text !== undefined && text !== null) e.textContent = text;
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  }

  function day(iso) {
    return iso ? new Date(iso).toISOString().slice(0, 10) : "";
  }

  function txLink(hash) {
    if (settings.explorerTxUrl) {
      const a = el("a", short(hash), { href: settings.explorerTxUrl.replace("{hash}", hash), target: "_blank", rel: "noopener noreferrer", title: hash });
      return a;
    }
    return el("code", short(hash), { title: hash });
  }

  function statusText(s) {
    if (s.status === "trialing") {
      return s.cancelAtPeriodEnd
        ? "Free trial, ends " + day(s.currentPeriodEnd) + " with nothing charged"
        : "Free trial until " + day(s.currentPeriodEnd);
    }
    if (s.status === "active" && s.cancelAtPeriodEnd) return "Active, ends " + day(s.currentPeriodEnd);
    if (s.status === "past_due" && s.cancelAtPeriodEnd) return "Past due, ends " + day(s.currentPeriodEnd);
    return { active: "Active", past_due: "Past due (payment failed)", cancelled: "Cancelled", ended: "Ended" }[s.status] || s.status;
  }

  function render() {
    listEl.textContent = "";
    for (const s of subs) {
      const li = el("li", null, {
        class: "card sub",
        "data-id": String(s.onchainId),
        "data-status": s.status,
        "data-cancelling": String(s.cancelAtPeriodEnd),
      });
      li.appendChild(el("h2", (s.planName || "Plan #" + s.planOnchainId) + " · " + (s.amount || "?") + " USDC / month"));
      const facts = el("dl", null, { class: "facts" });
      const fact = (k, v) => { facts.appendChild(el("dt", k)); const d = el("dd"); d.append(v); facts.appendChild(d); };
      fact("Merchant", (s.merchant.name ? s.merchant.name + " · " : "") + (s.merchant.code ? s.merchant.code + " (" + short(s.merchant.wallet) + ")" : short(s.merchant.wallet)));
      fact("Status", el("span", statusText(s), { class: "sub-status" }));
      fact("Next charge", s.nextChargeAt ? day(s.nextChargeAt) + " · " + (s.amount || "?") + " USDC" : "none");
      fact("Subscription", "#" + s.onchainId + " since " + day(s.createdAt));
      if (s.pendingPlanChange) {
        const to = s.pendingPlanChange;
        fact("Plan change", "To " + (to.planName || "plan #" + to.planOnchainId) + " at " + (to.amount || "?") + " USDC / month from " + day(s.currentPeriodEnd));
      }
      li.appendChild(facts);
      if (s.ledger.length) {
        const table = el("table", null, { "aria-label": "Payments" });
        const head = el("tr");
        for (const h of ["Date", "Payment", "Amount", "Transaction"]) head.appendChild(el("th", h));
        table.appendChild(head);
        for (const c of s.ledger) {
          const tr = el("tr", null, { "data-kind": c.kind });
          tr.appendChild(el("td", day(c.at)));
          const what = {
            charge: "Period " + c.period,
            proration: "Upgrade, period " + c.period + " (prorated)",
            refund: "Refund of period " + c.period,
          }[c.kind] || "Failed (" + (c.failureReason || "?") + ")";
          tr.appendChild(el("td", what));
          const sign = c.kind === "refund" ? "+" : "";
          tr.appendChild(el("td", sign + (c.amount || "?") + " USDC" + (c.confirmed ? "" : " (confirming)")));
          const td = el("td");
          td.appendChild(txLink(c.transactionHash));
          tr.appendChild(td);
          table.appendChild(tr);
        }
        // A phone scrolls the table, not the page.
        const scroll = el("div", null, { class: "table-scroll", tabindex: "0", role: "region", "aria-label": "Payments (scrolls sideways)" });
        scroll.appendChild(table);
        li.appendChild(scroll);
      }
      if (s.planChoices && s.planChoices.length) {
        const form = el("div", null, { class: "actions plan-choice" });
        const id = "plan-choice-" + s.onchainId;
        form.appendChild(el("label", "Change plan", { for: id }));
        const select = el("select", null, { id, "data-action": "plan-choice" });
        for (const p of s.planChoices) {
          const when = p.change === "upgrade" ? "now, prorated" : "from the next renewal";
          select.appendChild(el("option", p.name + " · " + (p.amount || "?") + " USDC / month (" + when + ")", { value: String(p.planOnchainId) }));
        }
        form.appendChild(select);
        const b = el("button", "Change plan", { type: "button", "data-action": "change-plan" });
        b.addEventListener("click", () => changePlan(s.onchainId, Number(select.value)));
        form.appendChild(b);
        if (s.pendingPlanChange) {
          const keep = el("button", "Keep " + (s.planName || "this plan"), { type: "button", "data-action": "keep-plan" });
          keep.addEventListener("click", () => changePlan(s.onchainId, s.planOnchainId));
          form.appendChild(keep);
        }
        li.appendChild(form);
      }
      if (s.cancellable) {
        const actions = el("div", null, { class: "actions" });
        if (!s.cancelAtPeriodEnd) {
          const b = el("button", "Cancel at period end", { type: "button", "data-action": "cancel-at-period-end" });
          b.addEventListener("click", () => cancel(s.onchainId, true));
          actions.appendChild(b);
        }
        const now = el("button", "Cancel now", { type: "button", class: "danger", "data-action": "cancel-now" });
        now.addEventListener("click", () => cancel(s.onchainId, false));
        actions.appendChild(now);
        for (const b of actions.querySelectorAll("button")) b.disabled = busy;
        li.appendChild(actions);
      }
      listEl.appendChild(li);
    }
  }

  function walletError(e, what) {
    if (e && e.code === 4001) {
      show("rejected", "You rejected the " + what + " in your wallet. Nothing was sent.", account ? ["refresh"] : ["connect"]);
    } else {
      show("error", "The wallet reported an error during the " + what + ": " + ((e && e.message) || e), account ? ["refresh"] : ["connect"]);
    }
  }

  async function connect() {
    const got = await window.ChainsubWallet.requestAccount({ show, walletError });
    if (got === undefined) return;
    account = got;
    if (!account) return;
    walletEl.hidden = false;
    walletEl.textContent = "Connected: " + account;
    await load();
  }

  async function switchChain() {
    if (await window.ChainsubWallet.switchChain(settings, { show, walletError })) await load();
  }


  async function getJson(url, headers) {
    const res = await fetch(url, { headers: Object.assign({ accept: "application/json" }, headers || {}) });
    const body = await res.json();
    if (!res.ok) {
      const e = new Error(body && body.error ? body.error.message : "HTTP " + res.status);
      e.status = res.status;
      throw e;
    }
    return body;
  }

  // The wallet signs the server's challenge (once per half hour): the list names merchants and
  // plans, which nobody may read from an address alone. False when the wallet refused.
  async function ensureProof() {
    if (proof && proof.account === account && Date.parse(proof.expiresAt) - Date.now() > 60000) return true;
    proof = null;
    const c = await getJson(settings.challengeUrl + "?wallet=" + encodeURIComponent(account));
    show("sign-in", "Sign the message in your wallet to show this wallet is yours (no transaction, no fee)…", []);
    let signature;
    try {
      signature = await ethereum().request({ method: "personal_sign", params: [hexUtf8(c.message), account] });
    } catch (e) {
      walletError(e, "signature");
      return false;
    }
    proof = { account, issuedAt: c.issuedAt, signature, expiresAt: c.expiresAt };
    return true;
  }

  async function fetchList() {
    let url = settings.listUrl + "?wallet=" + encodeURIComponent(account);
    if (settings.merchant) url += "&merchant=" + encodeURIComponent(settings.merchant);
    const body = await getJson(url, { "x-wallet-proof-issued-at": proof.issuedAt, "x-wallet-proof-signature": proof.signature });
    return body.data;
  }

  // Loads the wallet's subscriptions; `quiet` keeps the current message (after a cancel).
  // Only the latest call's answer is shown (a slow answer for another wallet is dropped).
  async function load(quiet) {
    if (!account) return;
    const mine = ++seq;
    const wallet = account;
    try {
      if (!(await onRightChain())) {
        listEl.textContent = "";
        show("wrong-chain", "Your wallet is on the wrong network. Switch to " + settings.chainName + " (chain " + settings.chainId + ") to continue.", ["switch"]);
        return;
      }
      if (!(await ensureProof())) return;
      if (mine !== seq) return;
      if (!quiet) show("loading", "Loading your subscriptions…", []);
      const data = await fetchList();
      if (mine !== seq || wallet !== account) return;
      subs = data;
    } catch (e) {
      if (mine !== seq) return;
      if (e && e.status === 401) proof = null;
      show("error", "Could not load your subscriptions: " + ((e && e.message) || e), ["refresh"]);
      return;
    }
    render();
    if (quiet) return;
    if (!subs.length) {
      show("empty", "This wallet has no subscriptions" + (settings.merchant ? " with this merchant." : " with this service."), ["refresh"]);
    } else {
      show("list", subs.length === 1 ? "1 subscription." : subs.length + " subscriptions.", ["refresh"]);
    }
  }

  function cancel(id, atPeriodEnd) {
    const what = atPeriodEnd ? "cancellation at period end" : "cancellation";
    return send({
      what,
      url: settings.cancelUrl + "?from=" + encodeURIComponent(account) + "&subscription=" + id + "&atPeriodEnd=" + atPeriodEnd,
      confirm: "Confirm the " + what + " of subscription #" + id + " in your wallet…",
      done: atPeriodEnd
        ? "Confirmed: subscription #" + id + " ends at the end of its current period; no further charges."
        : "Confirmed: subscription #" + id + " is cancelled; no further charges.",
      indexed: (s) => !s || (atPeriodEnd ? s.cancelAtPeriodEnd : s.status === "cancelled"),
      id,
    });
  }

  function changePlan(id, plan) {
    return send({
      what: "plan change",
      url: settings.planChangeUrl + "?from=" + encodeURIComponent(account) + "&subscription=" + id + "&plan=" + plan,
      confirm: null, // the prepared transaction's label states the change
      done: "Confirmed: the plan change of subscription #" + id + " is on chain.",
      indexed: (s) => !s || (s.planOnchainId === plan ? !s.pendingPlanChange : s.pendingPlanChange && s.pendingPlanChange.planOnchainId === plan),
      id,
    });
  }

  // One wallet transaction: the server prepares it (after checking the chain), the wallet
  // sends it, the page waits for its receipt and then for the index to show it.
  async function send(a) {
    if (busy || !account) return;
    busy = true;
    delete card.dataset.indexed;
    delete statusEl.dataset.tx;
    try {
      if (!(await onRightChain())) {
        show("wrong-chain", "Your wallet is on the wrong network. Switch to " + settings.chainName + " (chain " + settings.chainId + ") to continue.", ["switch"]);
        return;
      }
      show("preparing", "Preparing the " + a.what + "…", []);
      const res = await fetch(a.url, { headers: { accept: "application/json" } });
      const prepared = await res.json();
      if (!res.ok) {
        const msg = prepared && prepared.error ? prepared.error.message : "HTTP " + res.status;
        show("refused", "No transaction was prepared: " + msg, ["refresh"]);
        return;
      }
      show("confirm", (a.confirm || prepared.label + ": confirm it in your wallet…"), []);
      let hash;
      try {
        hash = await ethereum().request({ method: "eth_sendTransaction", params: [prepared.tx] });
      } catch (e) {
        walletError(e, a.what);
        return;
      }
      show("pending", "Pending: waiting for the " + a.what + " transaction " + short(hash) + " to be confirmed…", []);
      const r = await receipt(hash, RECEIPT_TIMEOUT_MS);
      if (!r) {
        show("stalled", "The " + a.what + " transaction " + hash + " is not confirmed yet (it may have been replaced or dropped in your wallet). Refresh to see where things stand.", ["refresh"]);
        return;
      }
      if (BigInt(r.status) !== 1n) {
        show("failed", "The " + a.what + " transaction failed on chain (" + hash + "). Nothing changed.", ["refresh"]);
        return;
      }
      show("confirmed", a.done + " Transaction " + hash + ".", ["refresh"]);
      statusEl.dataset.tx = hash;
      // The list comes from the index, a few blocks behind the chain: refresh until it shows
      // the change (or give up quietly after a minute; the chain has it either way).
      for (let i = 0; i < 60; i++) {
        await load(true);
        if (a.indexed(subs.find((x) => x.onchainId === a.id))) break;
        await sleep(1000);
      }
      card.dataset.indexed = "true";
    } catch (e) {
      show("error", "Something went wrong: " + ((e && e.message) || e), ["refresh"]);
    } finally {
      busy = false;
      for (const b of listEl.querySelectorAll("button")) b.disabled = false;
      if (walletMoved) await followWallet();
    }
  }

  // Catches up with an account or chain switch the wallet made during a flow.
  async function followWallet() {
    walletMoved = false;
    let accounts = [];
    try {
      accounts = await ethereum().request({ method: "eth_accounts" });
    } catch (e) {
      accounts = [];
    }
    onAccounts(accounts);
  }

  function onAccounts(accounts) {
    account = accounts && accounts[0] ? accounts[0] : null;
    if (!account) {
      walletEl.hidden = true;
      listEl.textContent = "";
      subs = [];
      show("idle", "Wallet disconnected.", ["connect"]);
      return;
    }
    walletEl.hidden = false;
    walletEl.textContent = "Connected: " + account;
    load();
  }

  btn.connect.addEventListener("click", connect);
  btn.switch.addEventListener("click", switchChain);
  btn.refresh.addEventListener("click", () => { delete card.dataset.indexed; load(); });

  const eth = ethereum();
  if (eth && typeof eth.on === "function") {
    eth.on("chainChanged", () => {
      if (busy) walletMoved = true;
      else load();
    });
    eth.on("accountsChanged", (accounts) => {
      if (busy) walletMoved = true;
      else onAccounts(accounts);
    });
  }
  if (!eth) show("no-wallet", window.ChainsubWallet.NO_WALLET, []);
  else show("idle", "Connect your wallet to see and manage your subscriptions.", ["connect"]);
})();
