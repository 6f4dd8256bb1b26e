// Chainsub pages' wallet helpers (checkout, account, dashboard): the EIP-1193 provider, chain
// check, receipts and text encoding, in one place. Loaded before each page's own script.
"use strict";

window.ChainsubWallet = (function () {
  // The injected EIP-1193 provider, or null when the browser has no wallet.
  function ethereum() {
    return window.ethereum && typeof window.ethereum.request === "function" ? window.ethereum : null;
  }

  // `0x1234…abcd`: enough to recognise, short enough to read.
  function short(a) {
    return a ? a.slice(0, 6) + "…" + a.slice(-4) : "";
  }

  // Whether the wallet is on chain `chainId` (a number or decimal string).
  async function onRightChain(chainId) {
    const id = await ethereum().request({ method: "eth_chainId" });
    return BigInt(id) === BigInt(chainId);
  }

  function sleep(ms) {
    return new Promise((r) => setTimeout(r, ms));
  }

  // The receipt of `hash`, polled every second; null when it is not mined within
  // `timeoutMs` (dropped, or replaced from the wallet). No timeout when it is not given.
  async function receipt(hash, timeoutMs) {
    const deadline = timeoutMs ? Date.now() + timeoutMs : Infinity;
    while (Date.now() < deadline) {
      const r = await ethereum().request({ method: "eth_getTransactionReceipt", params: [hash] });
      if (r) return r;
      await sleep(1000);
    }
    return null;
  }

  // `text` as 0x-hex UTF-8, the form `personal_sign` takes.
  function hexUtf8(text) {
    return "0x" + Array.from(new TextEncoder().encode(text), (b) => b.toString(16).padStart(2, "0")).join("");
  }

  const NO_WALLET = "No browser wallet found. Install a wallet such as MetaMask, then reload this page.";

  // The connect step every page shares. `ui` is the page's { show, walletError }. Returns the
  // account; null when the wallet shared none (shown); undefined when it failed (shown).
  async function requestAccount(ui) {
    const eth = ethereum();
    if (!eth) {
      ui.show("no-wallet", NO_WALLET, []);
      return undefined;
    }
    ui.show("connecting", "Waiting for your wallet to connect…", []);
    let accounts;
    try {
      accounts = await eth.request({ method: "eth_requestAccounts" });
    } catch (e) {
      ui.walletError(e, "connection request");
      return undefined;
    }
    const account = accounts && accounts[0] ? accounts[0] : null;
    if (!account) ui.show("idle", "The wallet shared no account.", ["connect"]);
    return account;
  }

  // Asks the wallet to switch to the page's chain (`settings.chainId`, `.chainIdHex`); false
  // (shown through `ui`) when it did not.
  async function switchChain(settings, ui) {
    try {
      await ethereum().request({ method: "wallet_switchEthereumChain", params: [{ chainId: settings.chainIdHex }] });
      return true;
    } catch (e) {
      if (e && e.code === 4902) {
        ui.show("wrong-chain", "Your wallet does not know " + (settings.chainName || "chain " + settings.chainId) + " (chain " + settings.chainId + "). Add it in your wallet, then try again.", ["switch"]);
      } else {
        ui.walletError(e, "network switch");
      }
      return false;
    }
  }

  // Selects the text field `input` and copies its value; false when the browser refused the
  // clipboard (the text stays selected for the user to copy).
  async function copyField(input) {
    input.select();
    try {
      await navigator.clipboard.writeText(input.value);
      return true;
    } catch (_) {
      return false;
    }
  }

  return { ethereum, short, onRightChain, sleep, receipt, hexUtf8, requestAccount, switchChain, copyField, NO_WALLET };
})();
