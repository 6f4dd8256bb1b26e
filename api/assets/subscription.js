// Chainsub dashboard, one subscription (/dashboard/subscriptions/{id}): its actions (cancel
// through the service, a plan-change link for the customer) and the refund. The
// server prepares the calls (POST /dashboard/api/subscriptions/{id}/refunds, with the
// session's CSRF token: an approval first when the wallet's allowance is short, then the
// refund) after reading the period's limits from the contract; the merchant's own wallet
// (EIP-1193) sends them. States on #refund[data-state], announced in #refund-status.
"use strict";

(function () {
  const W = window.ChainsubWallet;
  const settings = JSON.parse(document.getElementById("subscription-settings").textContent);
  const base = "/dashboard/api/subscriptions/" + encodeURIComponent(settings.subscriptionId);

  // POST to one of the subscription's dashboard endpoints; resolves to [ok, body].
  async function post(path, body) {
    const res = await fetch(base + path, {
      method: "POST",
      headers: { accept: "application/json", "content-type": "application/json", [settings.csrfHeader]: settings.csrfToken },
      credentials: "same-origin",
      body: JSON.stringify(body),
    });
    return [res.ok, await res.json()];
  }

  // ------------------------------------------------------------------ actions
  const actions = document.getElementById("actions");
  if (actions) {
    const say = (state, message) => {
      actions.dataset.state = state;
      document.getElementById("actions-status").textContent = message;
    };
    const failed = (body) => (body && body.error ? body.error.message : "the request failed");
    for (const [id, atPeriodEnd] of [["cancel-at-period-end", true], ["cancel-now", false]]) {
      const b = document.getElementById(id);
      if (!b) continue;
      b.addEventListener("click", async () => {
        if (!atPeriodEnd && !window.confirm("Cancel this subscription now? No further charges; the current period is not refunded.")) return;
        say("sending", "Sending the cancellation…");
        try {
          const [ok, body] = await post("/cancel", { atPeriodEnd });
          if (!ok) return say("refused", "Not cancelled: " + failed(body));
          say("sent", (atPeriodEnd ? "Cancellation at period end" : "Cancellation") + " sent on chain (" + body.transactionHash + "). The state changes here once it is indexed.");
        } catch (e) {
          say("error", "Not cancelled: " + e.message);
        }
      });
    }
    const make = document.getElementById("plan-change-make");
    if (make) {
      make.addEventListener("click", async () => {
        say("sending", "Making the link…");
        try {
          const [ok, body] = await post("/plan-change-links", { planId: document.getElementById("plan-change-plan").value });
          if (!ok) return say("refused", "No link: " + failed(body));
          document.getElementById("plan-change-url").value = body.url;
          document.getElementById("plan-change-result").hidden = false;
          say("link", "Link made (" + body.kind + "), valid until " + body.expiresAt + ". Send it to the customer.");
        } catch (e) {
          say("error", "No link: " + e.message);
        }
      });
      document.getElementById("plan-change-copy").addEventListener("click", async () => {
        if (await W.copyField(document.getElementById("plan-change-url"))) say("copied", "Link copied.");
        else say("link", "Select the link and copy it.");
      });
    }
  }

  // ------------------------------------------------------------------ refund
  const card = document.getElementById("refund");
  if (!card) return;
  const statusEl = document.getElementById("refund-status");
  const button = document.getElementById("refund-send");
  const RECEIPT_TIMEOUT_MS = 10 * 60 * 1000;

  function show(state, message) {
    card.dataset.state = state;
    statusEl.textContent = message;
    button.disabled = ["preparing", "confirm", "pending"].includes(state);
  }

  async function refund() {
    const eth = W.ethereum();
    if (!eth) {
      show("no-wallet", W.NO_WALLET);
      return;
    }
    const amount = document.getElementById("refund-amount").value.trim();
    const cancel = document.getElementById("refund-cancel").checked;
    show("preparing", "Preparing the refund…");
    let prepared;
    try {
      const [ok, body] = await post("/refunds", { amount, cancel });
      prepared = body;
      if (!ok) {
        show("refused", "No refund was prepared: " + (body.error ? body.error.message : "the request failed"));
        return;
      }
    } catch (e) {
      show("error", "The refund could not be prepared: " + e.message);
      return;
    }
    if (prepared.insufficientBalance) {
      show("refused", "Your wallet's USDC balance is below " + prepared.amount + " USDC: top it up, then refund.");
      return;
    }
    let accounts;
    try {
      accounts = await eth.request({ method: "eth_requestAccounts" });
    } catch (e) {
      show("rejected", "Your wallet did not connect: nothing was sent.");
      return;
    }
    if (!accounts.some((a) => a.toLowerCase() === prepared.from.toLowerCase())) {
      show("wrong-wallet", "Connect your merchant wallet " + prepared.from + ": it pays the refund.");
      return;
    }
    if (!(await W.onRightChain(settings.chainId))) {
      show("wrong-chain", "Your wallet is on another network: switch to " + settings.chainName + " (chain " + settings.chainId + ").");
      return;
    }
    for (const step of prepared.steps) {
      show("confirm", step.label + ": confirm it in your wallet…");
      let hash;
      try {
        hash = await eth.request({ method: "eth_sendTransaction", params: [step.tx] });
      } catch (e) {
        show(e && e.code === 4001 ? "rejected" : "error", (e && e.code === 4001 ? "You rejected the transaction in your wallet" : "The wallet failed: " + ((e && e.message) || e)) + ". Nothing more was sent.");
        return;
      }
      show("pending", "Waiting for " + step.step + " transaction " + hash + " to be mined…");
      const r = await W.receipt(hash, RECEIPT_TIMEOUT_MS);
      if (!r || BigInt(r.status) !== 1n) {
        show("failed", "The " + step.step + " transaction " + hash + (r ? " failed on chain" : " is not mined yet") + ": check your wallet.");
        return;
      }
      card.dataset.tx = hash;
    }
    show("confirmed", "Refunded " + prepared.amount + " USDC of period " + prepared.period + " on chain. It appears in the ledger once indexed.");
  }

  button.addEventListener("click", refund);
})();
