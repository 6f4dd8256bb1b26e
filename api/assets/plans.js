// Chainsub dashboard, plans (/dashboard/plans): create a plan and follow its provisioning
// on chain (POST /dashboard/api/plans, then GET /dashboard/api/plans/{id} until it is
// active or failed), make a checkout link and copy it (POST /dashboard/api/checkouts), and
// deactivate a plan with the merchant's own wallet (POST /dashboard/api/plans/{id}/deactivation
// prepares the call; the wallet sends it; the page waits for the index to say so).
// Every call carries the session's CSRF token. States on each card's data-state.
"use strict";

(function () {
  const W = window.ChainsubWallet;
  const settings = JSON.parse(document.getElementById("plans-settings").textContent);
  const POLL_MS = 1000;
  const FOLLOW_MS = 3 * 60 * 1000;

  async function call(method, path, body, headers) {
    const res = await fetch(path, {
      method,
      headers: Object.assign({ accept: "application/json", "content-type": "application/json", [settings.csrfHeader]: settings.csrfToken }, headers || {}),
      credentials: "same-origin",
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    return [res.ok, await res.json()];
  }
  const failed = (body) => (body && body.error ? body.error.message : "the request failed");
  const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

  const LABELS = {
    active: "active",
    deactivated: "deactivated (no new subscriptions)",
    failed: "provisioning failed",
    pending: "provisioning on chain…",
  };

  // The table row of plan `p` (an API plan object), made or refreshed.
  function showPlan(p) {
    const tbody = document.querySelector("#plans tbody");
    let tr = tbody.querySelector('tr[data-plan-id="' + CSS.escape(p.id) + '"]');
    if (!tr) {
      tr = document.createElement("tr");
      tr.dataset.planId = p.id;
      for (let i = 0; i < 6; i++) tr.appendChild(document.createElement("td"));
      const name = tr.cells[0];
      name.append(p.name, document.createElement("br"));
      const code = document.createElement("code");
      code.className = "muted";
      code.textContent = p.id;
      name.appendChild(code);
      tr.cells[1].textContent = p.amount + " USDC / month";
      tr.cells[2].textContent = p.trialDays ? p.trialDays + " days" : "—";
      const slug = document.createElement("code");
      slug.textContent = p.slug;
      tr.cells[3].appendChild(slug);
      tr.cells[4].className = "plan-state";
      tbody.prepend(tr);
      const none = document.getElementById("no-plans");
      if (none) none.remove();
    }
    const cell = tr.cells[4];
    cell.dataset.status = p.status;
    cell.textContent = LABELS[p.status] || p.status;
    if (p.status === "failed" && p.provisioning.error) cell.textContent += ": " + p.provisioning.error;
    if (p.status === "active" && p.chain) cell.textContent += " (block " + p.chain.blockNumber + ")";
    const actions = tr.cells[5];
    const button = actions.querySelector("button.deactivate");
    if (p.status === "active" && !button) {
      const b = document.createElement("button");
      b.type = "button";
      b.className = "deactivate danger";
      b.dataset.planId = p.id;
      b.setAttribute("aria-label", "Deactivate " + p.name);
      b.textContent = "Deactivate";
      actions.appendChild(b);
    } else if (p.status !== "active" && button) {
      button.remove();
    }
    const select = document.getElementById("link-plan");
    const option = select.querySelector('option[value="' + CSS.escape(p.id) + '"]');
    if (p.status === "active" && !option) {
      const o = document.createElement("option");
      o.value = p.id;
      o.textContent = p.name + " — " + p.amount + " USDC / month";
      select.prepend(o);
      select.value = p.id;
    } else if (p.status !== "active" && option) {
      option.remove();
    }
  }

  // Reads plan `id` every second until `done(plan)` holds (or FOLLOW_MS pass); the row
  // follows each answer. Resolves to the last plan read, null when none could be.
  async function follow(id, done) {
    const deadline = Date.now() + FOLLOW_MS;
    let last = null;
    while (Date.now() < deadline) {
      try {
        const [ok, body] = await call("GET", "/dashboard/api/plans/" + encodeURIComponent(id));
        if (ok) {
          last = body;
          showPlan(body);
          if (done(body)) return body;
        }
      } catch (_) {
        // A lost poll: the next one asks again.
      }
      await sleep(POLL_MS);
    }
    return last;
  }
  const settled = (p) => p.status !== "pending";

  // ------------------------------------------------------------------ create
  const create = document.getElementById("create");
  const form = document.getElementById("create-form");
  const createButton = document.getElementById("create-send");
  const sayCreate = (state, message) => {
    create.dataset.state = state;
    document.getElementById("create-status").textContent = message;
    createButton.disabled = ["sending", "provisioning"].includes(state);
  };
  // One Idempotency-Key per plan asked for: a resubmission of the same form (a timeout, a
  // double click) resumes that plan instead of making a second one.
  let key = null;
  form.addEventListener("input", () => {
    key = null;
  });
  form.addEventListener("submit", async (ev) => {
    ev.preventDefault();
    const name = document.getElementById("plan-name").value.trim();
    const amount = document.getElementById("plan-amount").value.trim();
    const trial = document.getElementById("plan-trial").value.trim();
    const body = { name, amount, currency: "USDC", interval: "month" };
    if (trial !== "" && trial !== "0") body.trialDays = Number(trial);
    key = key || crypto.randomUUID();
    sayCreate("sending", "Creating " + name + " on chain…");
    let plan;
    try {
      const [ok, answer] = await call("POST", "/dashboard/api/plans", body, { "idempotency-key": key });
      if (!ok) return sayCreate("refused", "Not created: " + failed(answer));
      plan = answer;
    } catch (e) {
      return sayCreate("error", "Not created: " + e.message + ". Submit again: the same plan is resumed, never doubled.");
    }
    showPlan(plan);
    if (plan.status === "pending") {
      sayCreate("provisioning", "Sent on chain (transaction " + plan.provisioning.transactionHash + "): waiting for it to be mined and indexed…");
      plan = (await follow(plan.id, settled)) || plan;
    }
    key = null;
    if (plan.status === "active") {
      form.reset();
      sayCreate("created", plan.name + " is on chain (plan " + plan.chain.onchainPlanId + ", block " + plan.chain.blockNumber + "): make its checkout link below.");
    } else if (plan.status === "failed") {
      sayCreate("failed", plan.name + " could not be created on chain: " + (plan.provisioning.error || "unknown error") + ".");
    } else {
      sayCreate("provisioning", plan.name + " is not on chain yet; this page shows it once it is.");
    }
  });

  // Plans still provisioning when the page loaded.
  for (const cell of document.querySelectorAll('#plans .plan-state[data-status="pending"]')) {
    follow(cell.closest("tr").dataset.planId, settled);
  }

  // ------------------------------------------------------------------ checkout link
  const link = document.getElementById("link");
  const sayLink = (state, message) => {
    link.dataset.state = state;
    document.getElementById("link-status").textContent = message;
  };
  document.getElementById("link-make").addEventListener("click", async () => {
    const planId = document.getElementById("link-plan").value;
    if (!planId) return sayLink("refused", "No active plan: create one first.");
    const customer = document.getElementById("link-customer").value.trim();
    const body = { planId };
    if (customer) body.customerExternalId = customer;
    sayLink("sending", "Making the link…");
    try {
      const [ok, answer] = await call("POST", "/dashboard/api/checkouts", body);
      if (!ok) return sayLink("refused", "No link: " + failed(answer));
      document.getElementById("link-url").value = answer.url;
      document.getElementById("link-open").href = answer.url;
      document.getElementById("link-result").hidden = false;
      sayLink("made", "Link made" + (customer ? " for customer " + customer : "") + ". Copy it and send it.");
    } catch (e) {
      sayLink("error", "No link: " + e.message);
    }
  });
  document.getElementById("link-copy").addEventListener("click", async () => {
    if (await W.copyField(document.getElementById("link-url"))) sayLink("copied", "Link copied.");
    else sayLink("made", "Select the link and copy it.");
  });

  // ------------------------------------------------------------------ deactivate
  const sayPlans = (state, message) => {
    document.getElementById("plans").dataset.state = state;
    document.getElementById("plans-status").textContent = message;
  };
  async function deactivate(b) {
    const id = b.dataset.planId;
    if (!window.confirm("Deactivate this plan? Its checkout takes no new subscriptions; existing subscriptions renew as before. This cannot be undone.")) return;
    const eth = W.ethereum();
    if (!eth) return sayPlans("no-wallet", W.NO_WALLET);
    b.disabled = true;
    try {
      const [ok, prepared] = await call("POST", "/dashboard/api/plans/" + encodeURIComponent(id) + "/deactivation", {});
      if (!ok) return sayPlans("refused", "Not deactivated: " + failed(prepared));
      const accounts = await eth.request({ method: "eth_requestAccounts" });
      if (!accounts.some((a) => a.toLowerCase() === prepared.from.toLowerCase())) {
        return sayPlans("wrong-wallet", "Connect your merchant wallet " + prepared.from + ": only it may deactivate the plan.");
      }
      if (!(await W.onRightChain(settings.chainId))) {
        return sayPlans("wrong-chain", "Your wallet is on another network: switch to " + settings.chainName + " (chain " + settings.chainId + ").");
      }
      sayPlans("confirm", "Deactivate plan " + prepared.onchainPlanId + ": confirm it in your wallet…");
      let hash;
      try {
        hash = await eth.request({ method: "eth_sendTransaction", params: [prepared.tx] });
      } catch (e) {
        return sayPlans(e && e.code === 4001 ? "rejected" : "error", e && e.code === 4001 ? "You rejected the transaction: the plan stays active." : "The wallet failed: " + ((e && e.message) || e));
      }
      sayPlans("pending", "Waiting for transaction " + hash + " to be mined…");
      const r = await W.receipt(hash, FOLLOW_MS);
      if (!r || BigInt(r.status) !== 1n) {
        return sayPlans("failed", "The transaction " + hash + (r ? " failed on chain" : " is not mined yet") + ": check your wallet.");
      }
      sayPlans("indexing", "Deactivated on chain; waiting for the index…");
      const p = await follow(id, (p) => p.status === "deactivated");
      if (p && p.status === "deactivated") sayPlans("deactivated", p.name + " is deactivated (block " + p.deactivation.blockNumber + ").");
    } catch (e) {
      sayPlans("error", "Not deactivated: " + ((e && e.message) || e));
    } finally {
      b.disabled = false;
    }
  }
  document.getElementById("plans").addEventListener("click", (ev) => {
    const b = ev.target.closest("button.deactivate");
    if (b) deactivate(b);
  });
})();
