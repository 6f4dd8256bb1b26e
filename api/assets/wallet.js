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

  return { ethereum, short, onRightChain, sleep, receipt, hexUtf8 };
})();
