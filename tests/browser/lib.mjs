// Shared by the browser scenarios: headless Debian Chromium through playwright-core, and a
// test wallet injected as window.ethereum (EIP-1193) that forwards to anvil's JSON-RPC, where
// the dev accounts are unlocked (eth_sendTransaction and personal_sign just work).
// The Rust test (tests/tests/browser.rs) starts the real stack and passes URLs in env vars.
import { chromium } from "playwright-core";
import { mkdirSync, readFileSync } from "node:fs";
import { createRequire } from "node:module";
import { join } from "node:path";

export function env(name) {
  const v = process.env[name];
  if (!v) throw new Error(`missing env ${name}`);
  return v;
}

export function check(cond, message) {
  if (!cond) throw new Error("assertion failed: " + message);
}

// Playwright's launch() gives Chromium a fresh temporary --user-data-dir of its own (it
// refuses the flag from us) and removes it on close; each scenario also uses new contexts.
export async function launch() {
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || "/usr/bin/chromium",
    args: [
      "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
      "--disable-background-networking", "--disable-component-update", "--disable-sync",
    ],
  });
  const close = async () => {
    await browser.close().catch(() => {});
  };
  return { browser, close };
}

export async function rpc(url, method, params) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ jsonrpc: "2.0", id: 1, method, params }),
  });
  return res.json();
}

// The page side of the wallet: a minimal EIP-1193 provider whose requests go to the Node
// binding below, and whose events the test can fire.
const PROVIDER_SHIM = `(() => {
  const listeners = {};
  window.ethereum = {
    isChainsubTestWallet: true,
    async request({ method, params }) {
      const r = await window.__walletRequest(method, params || []);
      if (r && r.error) {
        const e = new Error(r.error.message);
        e.code = r.error.code;
        throw e;
      }
      return r.result;
    },
    on(ev, fn) { (listeners[ev] = listeners[ev] || []).push(fn); },
    removeListener(ev, fn) { listeners[ev] = (listeners[ev] || []).filter((f) => f !== fn); },
    __emit(ev, arg) { for (const f of listeners[ev] || []) f(arg); },
  };
})();`;

// A page with a test wallet for `account`. `wallet` is mutable test state: chainIdHex (what
// the wallet reports), typedData (false: eth_signTypedData_v4 is unsupported, code 4200), rejectNext (the next signing request answers 4001), rejectWhen (a
// predicate (method, params) choosing the next request to reject), calls (a log).
export async function walletPage(browser, { rpcUrl, account, chainIdHex, typedData = true }) {
  const context = await browser.newContext({ viewport: { width: 900, height: 1000 } });
  const page = await context.newPage();
  const wallet = { account, chainIdHex, typedData, rejectNext: false, rejectWhen: null, calls: [] };
  page.on("console", (m) => { if (m.type() === "error") console.error("[page]", m.text()); });
  page.on("pageerror", (e) => console.error("[page error]", e.message));
  await page.exposeFunction("__walletRequest", async (method, params) => {
    wallet.calls.push(method);
    switch (method) {
      case "eth_requestAccounts":
      case "eth_accounts":
        return { result: [wallet.account] };
      case "eth_chainId":
        return { result: wallet.chainIdHex };
      case "wallet_switchEthereumChain": {
        wallet.chainIdHex = params[0].chainId;
        const id = wallet.chainIdHex;
        setTimeout(() => page.evaluate((c) => window.ethereum.__emit("chainChanged", c), id).catch(() => {}), 0);
        return { result: null };
      }
      case "eth_signTypedData_v4":
        if (!wallet.typedData) return { error: { code: 4200, message: "The requested method is not supported by this wallet." } };
        if (wallet.typedDataError) {
          const error = wallet.typedDataError;
          wallet.typedDataError = null;
          return { error };
        }
        // Wallets take the typed data as a JSON string (MetaMask's form); anvil wants the object.
        if (typeof params[1] === "string") params = [params[0], JSON.parse(params[1])];
      // falls through: a signing request like the others
      case "eth_sendTransaction":
      case "personal_sign":
        if (wallet.rejectNext || (wallet.rejectWhen && wallet.rejectWhen(method, params))) {
          wallet.rejectNext = false;
          wallet.rejectWhen = null;
          return { error: { code: 4001, message: "User rejected the request." } };
        }
        break;
      default:
        break;
    }
    const r = await rpc(rpcUrl, method, params);
    return r.error ? { error: r.error } : { result: r.result };
  });
  await page.addInitScript(PROVIDER_SHIM);
  return { context, page, wallet };
}

// Waits until the page's card `#card` shows state `s` (its data-state); returns the #status
// text.
export async function waitState(page, card, s, timeout = 30000) {
  await page.waitForSelector(`#${card}[data-state="${s}"]`, { timeout });
  return page.locator("#status").textContent();
}

// Fires an EIP-1193 event in the page, as a wallet does when the user switches.
export async function emit(page, event, arg) {
  await page.evaluate(([ev, a]) => window.ethereum.__emit(ev, a), [event, arg]);
}

export async function screenshot(page, name) {
  const dir = env("SCREENSHOT_DIR");
  mkdirSync(dir, { recursive: true });
  const path = join(dir, `${name}.png`);
  await page.screenshot({ path, fullPage: true });
  console.log(`screenshot: ${path}`);
  return path;
}

// Runs a scenario; on failure prints the error, saves a screenshot of every open page and
// exits non-zero so the Rust test fails.
export async function run(name, body) {
  const { browser, close } = await launch();
  try {
    await body(browser);
    console.log(`${name}: ok`);
  } catch (e) {
    console.error(`${name}: FAILED: ${e.stack || e}`);
    let i = 0;
    for (const ctx of browser.contexts()) {
      for (const p of ctx.pages()) {
        await screenshot(p, `${name}-failure-${i++}`).catch(() => {});
        const status = await p.locator("#status").textContent().catch(() => null);
        if (status) console.error(`  #status: ${status}`);
      }
    }
    process.exitCode = 1;
  } finally {
    await close();
  }
}

// The page fits a `width` px wide screen: nothing scrolls sideways (on failure, names the
// elements that stick out, outside scrolling tables). Leaves the viewport at `width`.
export async function fitsWidth(page, width, name) {
  await page.setViewportSize({ width, height: page.viewportSize().height });
  const [scroll, inner] = await page.evaluate(() => [document.documentElement.scrollWidth, window.innerWidth]);
  await screenshot(page, `${name}-${width}`);
  if (scroll <= inner) return;
  const wide = await page.evaluate((w) => [...document.querySelectorAll("body *")]
    .filter((e) => e.getBoundingClientRect().right > w + 1)
    .filter((e) => !e.closest(".table-scroll") || e.classList.contains("table-scroll"))
    .slice(-5)
    .map((e) => e.tagName + (e.id ? "#" + e.id : "") + "." + e.className + ": " + Math.round(e.getBoundingClientRect().right)), inner);
  check(false, `${name}: no horizontal overflow at ${width}px: ${scroll} > ${inner}: ${wide}`);
}

let axeSource = null;

// An axe-core scan of the page finds no serious or critical accessibility violation. Run in
// the page through the DevTools protocol, so the page's CSP (scripts from its origin only)
// stays as it is.
export async function axeClean(page, name) {
  axeSource ??= readFileSync(createRequire(import.meta.url).resolve("axe-core/axe.min.js"), "utf8");
  await page.evaluate(axeSource);
  const result = await page.evaluate(() => window.axe.run(document, { resultTypes: ["violations"] }));
  const bad = result.violations.filter((v) => v.impact === "serious" || v.impact === "critical");
  check(bad.length === 0, `${name}: axe: ${JSON.stringify(bad.map((v) => [v.id, v.impact, v.nodes.map((n) => n.target)]))}`);
}

// A GET of the merchant API at `base` with `key`: its JSON (the check fails on a non-2xx).
export function merchantApi(base, key) {
  return async (path) => {
    const res = await fetch(base + path, { headers: { authorization: "Bearer " + key } });
    check(res.ok, `${path}: ${res.status}`);
    return res.json();
  };
}

// The text of the first element `sel` matches.
export const text = (page, sel) => page.locator(sel).first().textContent();
