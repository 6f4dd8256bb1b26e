// Chainsub checkout: drives the customer's wallet through window.ethereum (EIP-1193).
// The server encodes every transaction (GET …/tx); this file only sends what it is given,
// so no ABI library is needed. States are shown on #checkout[data-state] and announced in
// the #status live region.
"use strict";

(function () {
  const { ethereum, short, receipt } = window.ChainsubWallet;
  const onRightChain = () => window.ChainsubWallet.onRightChain(settings.chainId);
  const settings = JSON.parse(document.getElementById("checkout-settings").textContent);
  const card = document.getElementById("checkout");
  const statusEl = document.getElementById("status");
  const btn = {
    connect: document.getElementById("connect"),
    switch: document.getElementById("switch"),
    subscribe: document.getElementById("subscribe"),
    refresh: document.getElementById("refresh"),
  };
  const accountEl = document.getElementById("account");
  const stepsEl = document.getElementById("steps");
  const resultEl = document.getElementById("result");
  let account = null;
  let plan = null; // the last answer of the tx endpoint
  let done = {}; // steps of `plan` already mined, skipped when the customer tries again
  let busy = false;
  let permitted = null; // the subscribe step with the signed permit inside, once signed

  function show(state, message, buttons) {
    card.dataset.state = state;
    statusEl.textContent = message;
    for (const [name, el] of Object.entries(btn)) el.hidden = !buttons.includes(name);
  }

  function renderSteps() {
    stepsEl.textContent = "";
    if (!plan) return;
    for (const s of plan.steps) {
      const li = document.createElement("li");
      li.textContent = s.label;
      li.dataset.step = s.step;
      if (done[s.step]) {
        li.dataset.done = "true";
        li.textContent += " ✓";
      }
      stepsEl.appendChild(li);
    }
  }

  function walletError(e, what) {
    if (e && e.code === 4001) {
      show("rejected", "You rejected the " + what + " in your wallet. Nothing was sent; you can try again.",
        account ? ["subscribe"] : ["connect"]);
    } else {
      show("error", "The wallet reported an error during the " + what + ": " + ((e && e.message) || e),
        account ? ["refresh"] : ["connect"]);
    }
  }

  async function connect() {
    const got = await window.ChainsubWallet.requestAccount({ show, walletError });
    if (got === undefined) return;
    account = got;
    if (!account) return;
    accountEl.hidden = false;
    accountEl.textContent = "Connected: " + account;
    await check();
  }

  async function switchChain() {
    if (await window.ChainsubWallet.switchChain(settings, { show, walletError })) await check();
  }


  // Asks the server for the wallet's state and the transactions still to send.
  async function check() {
    if (!account) return;
    if (!(await onRightChain())) {
      show("wrong-chain", "Your wallet is on the wrong network. Switch to " + settings.chainName + " (chain " + settings.chainId + ") to continue.", ["switch"]);
      return;
    }
    if (settings.inactive) {
      show("inactive", "This plan no longer accepts new subscriptions.", []);
      return;
    }
    if (!settings.available) {
      show("unavailable", "This plan is not available on chain yet. Try again in a few minutes.", ["refresh"]);
      return;
    }
    show("checking", "Checking your balance and allowance…", []);
    let res;
    try {
      res = await fetch(settings.txUrl + "&from=" + encodeURIComponent(account), { headers: { accept: "application/json" } });
      plan = await res.json();
    } catch (e) {
      show("error", "Could not reach the service. Check your connection and try again.", ["refresh"]);
      return;
    }
    if (!res.ok) {
      const msg = plan && plan.error ? plan.error.message : "HTTP " + res.status;
      const code = plan && plan.error ? plan.error.code : "";
      plan = null;
      if (code === "plan_mismatch" || code === "plan_inactive") {
        // The server refused to prepare a transaction: nothing to send, nothing to retry.
        stepsEl.textContent = "";
        show("refused", "No transaction was prepared: " + msg, []);
        return;
      }
      show("error", "The service could not prepare the subscription: " + msg, ["refresh"]);
      return;
    }
    done = {};
    permitted = null;
    renderSteps();
    if (plan.alreadySubscribed) {
      stepsEl.textContent = "";
      show("already", "This wallet already has an active subscription to this plan (on-chain subscription #" + plan.alreadySubscribed + "). Nothing to do.", []);
      return;
    }
    if (plan.insufficientBalance) {
      show("insufficient", "Insufficient USDC balance: the first payment is " + plan.amount + " USDC and this wallet holds " + plan.balance + " USDC. Top up, then check again.", ["refresh"]);
      return;
    }
    ready();
  }

  function ready() {
    const step = (name) => plan.steps.some((s) => s.step === name);
    if (step("permit")) {
      btn.subscribe.textContent = "Sign and subscribe";
      show("ready", "Ready. Your wallet will ask for 1 signature (the USDC allowance, no fee) and 1 transaction.", ["subscribe"]);
    } else {
      const n = plan.steps.length;
      btn.subscribe.textContent = n > 1 ? "Approve USDC and subscribe" : "Subscribe";
      show("ready", "Ready. Your wallet will ask you to confirm " + (n > 1 ? n + " transactions" : "1 transaction") + ".", ["subscribe"]);
    }
  }

  // Asks the tx endpoint again with `extra` query parameters (the signed permit, or
  // permit=off); null (with the state shown) when it refuses.
  async function ask(extra) {
    let res, body;
    try {
      res = await fetch(settings.txUrl + "&from=" + encodeURIComponent(account) + extra, { headers: { accept: "application/json" } });
      body = await res.json();
    } catch (e) {
      show("error", "Could not reach the service. Check your connection and try again.", ["refresh"]);
      return null;
    }
    if (!res.ok) {
      show("error", "The service could not prepare the subscription: " + (body && body.error ? body.error.message : "HTTP " + res.status), ["refresh"]);
      return null;
    }
    return body;
  }

  // Signs the permit step; true when `permitted` holds the subscribe transaction with it.
  // A wallet that cannot sign typed data gets the two-transaction plan instead (`plan` is
  // replaced and false returned with `fallback` set).
  async function signPermit(s) {
    show("confirm", "Sign the USDC allowance in your wallet (a signature: no transaction, no fee)…", []);
    let signature;
    try {
      signature = await ethereum().request({ method: "eth_signTypedData_v4", params: [account, JSON.stringify(s.typedData)] });
    } catch (e) {
      // Only a wallet that does not have the method (EIP-1193 4200, JSON-RPC -32601) gets
      // the two transactions; a rejection, a pending request or an error is shown as such.
      if (!e || (e.code !== 4200 && e.code !== -32601)) {
        walletError(e, "allowance signature");
        return { stop: true };
      }
      const fallback = await ask("&permit=off");
      if (!fallback) return { stop: true };
      plan = fallback;
      done = {};
      permitted = null;
      renderSteps();
      if (plan.alreadySubscribed || plan.insufficientBalance) {
        check();
        return { stop: true };
      }
      return { fallback: true };
    }
    const q = "&permitValue=" + encodeURIComponent(s.permit.value) +
      "&permitDeadline=" + encodeURIComponent(s.permit.deadline) +
      "&permitSignature=" + encodeURIComponent(signature);
    const signed = await ask(q);
    if (!signed) return { stop: true };
    if (signed.alreadySubscribed || signed.insufficientBalance) {
      check();
      return { stop: true };
    }
    permitted = signed.steps.find((x) => x.step === "subscribe") || null;
    // Counted on this browser's clock from now (the deadline itself is chain time), with two
    // minutes to spare for the transaction to be mined.
    if (permitted) permitted.staleAtMs = Date.now() + (Number(s.permit.validForSecs || 0) - 120) * 1000;
    if (!permitted || !permitted.tx) {
      show("error", "The service did not prepare the subscription.", ["refresh"]);
      return { stop: true };
    }
    return {};
  }

  async function subscribe() {
    if (busy || !plan) return;
    busy = true;
    try {
      if (!(await onRightChain())) {
        show("wrong-chain", "Your wallet is on the wrong network. Switch to " + settings.chainName + " (chain " + settings.chainId + ") to continue.", ["switch"]);
        return;
      }
      for (let i = 0; i < plan.steps.length; i++) {
        const s = plan.steps[i];
        if (done[s.step]) continue;
        if (s.step === "permit") {
          const r = await signPermit(s);
          if (r.stop) return;
          if (r.fallback) {
            i = -1; // the new plan, from its first step
            continue;
          }
          done.permit = true;
          renderSteps();
          continue;
        }
        const what = s.step === "approve" ? "USDC approval" : "subscription";
        if (s.step === "subscribe" && permitted && Date.now() > permitted.staleAtMs) {
          // The signed permit is (nearly) past its deadline: ask the service for a fresh one
          // (new deadline) and let the customer start again; never re-sign the old message.
          permitted = null;
          await check();
          return;
        }
        const tx = s.step === "subscribe" && permitted ? permitted.tx : s.tx;
        show("confirm", "Confirm the " + what + " in your wallet…", []);
        let hash;
        try {
          hash = await ethereum().request({ method: "eth_sendTransaction", params: [tx] });
        } catch (e) {
          walletError(e, what);
          return;
        }
        show("pending", "Pending: waiting for the " + what + " transaction " + short(hash) + " to be confirmed…", []);
        const r = await receipt(hash);
        if (BigInt(r.status) !== 1n) {
          // A permit inside a failed transaction may be spent or stale: never reuse it.
          permitted = null;
          delete done.permit;
          show("failed", "The " + what + " transaction failed on chain (" + hash + "). No subscription was created.", ["refresh"]);
          return;
        }
        done[s.step] = true;
        renderSteps();
        if (s.step === "subscribe") confirmed(hash);
      }
    } catch (e) {
      show("error", "Something went wrong: " + ((e && e.message) || e), ["refresh"]);
    } finally {
      busy = false;
    }
  }

  function confirmed(hash) {
    resultEl.hidden = false;
    document.getElementById("tx-hash").textContent = hash;
    const link = document.getElementById("explorer-link");
    if (settings.explorerTxUrl) {
      link.href = settings.explorerTxUrl.replace("{hash}", hash);
      link.hidden = false;
    }
    document.getElementById("account-link").href = settings.accountUrl;
    show("confirmed", "Confirmed: you are subscribed. You can close this page, or manage your subscription from the link below.", []);
  }

  btn.connect.addEventListener("click", connect);
  btn.switch.addEventListener("click", switchChain);
  btn.subscribe.addEventListener("click", subscribe);
  btn.refresh.addEventListener("click", check);

  const eth = ethereum();
  if (eth && typeof eth.on === "function") {
    eth.on("chainChanged", () => { if (!busy) check(); });
    eth.on("accountsChanged", (accounts) => {
      if (busy) return;
      account = accounts && accounts[0] ? accounts[0] : null;
      if (!account) {
        accountEl.hidden = true;
        show("idle", "Wallet disconnected.", ["connect"]);
        return;
      }
      accountEl.textContent = "Connected: " + account;
      check();
    });
  }
  if (!eth) show("no-wallet", window.ChainsubWallet.NO_WALLET, []);
  else show("idle", "Connect your wallet to subscribe.", ["connect"]);
})();
