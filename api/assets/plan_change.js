// The plan-change page (/account/plan-change/{merchant}?…): connects the subscriber's wallet,
// gets the `changePlan` call from the page's tx endpoint (which checks on chain that this
// wallet is the subscriber) and has the wallet send it.
"use strict";

(function () {
  const W = window.ChainsubWallet;
  const settings = JSON.parse(document.getElementById("plan-change-settings").textContent);
  const root = document.getElementById("plan-change");
  const statusEl = document.getElementById("status");
  const buttons = { connect: document.getElementById("connect"), switch: document.getElementById("switch"), confirm: document.getElementById("confirm") };
  let account = null;

  function show(state, message, visible) {
    root.dataset.state = state;
    statusEl.textContent = message;
    for (const [name, b] of Object.entries(buttons)) b.hidden = !visible.includes(name);
  }

  function walletError(e, what) {
    if (e && e.code === 4001) show("rejected", "You declined the " + what + " in your wallet.", account ? ["confirm"] : ["connect"]);
    else show("error", "The wallet could not complete the " + what + ": " + ((e && e.message) || e), account ? ["confirm"] : ["connect"]);
  }

  const ui = { show, walletError };

  async function connect() {
    const a = await W.requestAccount(ui);
    if (!a) return;
    account = a;
    if (!(await W.onRightChain(settings.chainId))) {
      show("wrong-chain", "Your wallet is on another network.", ["switch"]);
      return;
    }
    show("ready", "Connected as " + W.short(account) + ". Review the change above, then confirm.", ["confirm"]);
  }

  async function confirmChange() {
    show("loading", "Preparing the transaction…", []);
    const r = await fetch(settings.txUrl + "&from=" + encodeURIComponent(account));
    const body = await r.json();
    if (!r.ok) {
      show("error", (body.error && body.error.message) || "The change could not be prepared.", ["connect"]);
      return;
    }
    show("pending", "Confirm the transaction in your wallet…", []);
    let hash;
    try {
      hash = await W.ethereum().request({ method: "eth_sendTransaction", params: [body.tx] });
    } catch (e) {
      walletError(e, "transaction");
      return;
    }
    root.dataset.tx = hash;
    show("pending", "Sent: " + hash + ". Waiting for it to be mined…", []);
    const receipt = await W.receipt(hash, 300000);
    if (receipt && receipt.status === "0x1") show("confirmed", "Done: your plan change is on chain. Transaction " + hash + ".", []);
    else if (receipt) show("failed", "The transaction failed on chain: nothing changed.", ["confirm"]);
    else show("stalled", "Not mined yet: check your wallet. Transaction " + hash + ".", []);
  }

  buttons.connect.addEventListener("click", connect);
  buttons.switch.addEventListener("click", async () => { if (await W.switchChain(settings, ui)) connect(); });
  buttons.confirm.addEventListener("click", confirmChange);
  show("idle", W.ethereum() ? "" : W.NO_WALLET, ["connect"]);
})();
