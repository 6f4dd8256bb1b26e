// Scenario: a merchant signs in on /dashboard/developers with Sign-In with Ethereum,
// generates an API key and sees it exactly once, rotates it in the UI (the old key fails with
// 401, the new one works), and queues a webhook test event that shows in the deliveries.
// env: BASE_URL, RPC_URL, CHAIN_ID, MERCHANT, SCREENSHOT_DIR.
import { check, env, run, screenshot, walletPage } from "./lib.mjs";

const base = env("BASE_URL");
const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);
const merchant = env("MERCHANT");

async function apiStatus(key) {
  const res = await fetch(base + "/api/v1/plans", { headers: { authorization: "Bearer " + key } });
  return res.status;
}

async function shownKey(page, notEqual) {
  await page.waitForSelector("#key-once:not([hidden])");
  await page.waitForFunction(
    (old) => { const v = document.getElementById("key-plaintext").value; return v && v !== old; },
    notEqual,
  );
  return page.locator("#key-plaintext").inputValue();
}

await run("dashboard", async (browser) => {
  const { page, wallet } = await walletPage(browser, { rpcUrl, account: merchant, chainIdHex });
  await page.goto(base + "/dashboard/developers");
  await screenshot(page, "dashboard-1-signed-out");

  // A rejected signature leaves the merchant signed out, with a message.
  wallet.rejectNext = true;
  await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
  await page.waitForFunction(() => document.getElementById("status").textContent.includes("rejected"));

  await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
  await page.waitForSelector("#key-status", { timeout: 30000 });
  check(wallet.calls.includes("personal_sign"), "signed with personal_sign");
  const wallet_shown = (await page.locator("#merchant-wallet").textContent()).toLowerCase();
  check(wallet_shown === merchant.toLowerCase(), `signed in as the merchant: ${wallet_shown}`);
  check((await page.locator("#key-status").textContent()).startsWith("No API key"), "no key yet");

  // Generate: the plaintext is shown once.
  await page.getByRole("button", { name: "Generate key" }).click();
  const first = await shownKey(page, "");
  check(/^sk_live_[0-9a-f]{64}$/.test(first), `key format: ${first.slice(0, 12)}…`);
  check((await page.locator("#status").textContent()).includes("Copy it now"), "told to copy now");
  await screenshot(page, "dashboard-2-key-shown-once");
  check((await apiStatus(first)) === 200, "the new key works");

  // Reload: only prefix and last 4 remain; the plaintext is nowhere in the page.
  await page.reload();
  const html = await page.content();
  check(!html.includes(first), "the plaintext is not shown again");
  check(!html.includes(first.slice(8, 40)), "no part of the secret is shown again");
  check(await page.locator("#key-once").isHidden(), "the one-time box is hidden");
  const status = await page.locator("#key-status").textContent();
  check(status.startsWith("sk_live_…" + first.slice(-4)), `status shows prefix and last4: ${status}`);
  await screenshot(page, "dashboard-3-after-reload");

  // Rotate (with confirmation): the old key fails at once, the new one works.
  await page.getByRole("button", { name: "Rotate key" }).click();
  await page.getByRole("button", { name: "Rotate now" }).click();
  const second = await shownKey(page, first);
  check(second !== first && /^sk_live_[0-9a-f]{64}$/.test(second), "a different new key");
  check((await apiStatus(first)) === 401, "the old key is rejected with 401");
  check((await apiStatus(second)) === 200, "the rotated key works");
  await screenshot(page, "dashboard-4-rotated");

  // Webhooks: reveal a secret, queue a test event, see it in the deliveries.
  await page.getByRole("button", { name: "Rotate secret" }).click();
  await page.waitForFunction(() => document.getElementById("secret-value").value.startsWith("whsec_"));
  await page.getByRole("button", { name: "Send test event" }).click();
  await page.waitForSelector("#deliveries tbody tr[data-delivery]", { timeout: 30000 });
  const row = await page.locator("#deliveries tbody tr[data-delivery]").first().textContent();
  check(row.includes("webhook.test"), `test delivery listed: ${row}`);
  await screenshot(page, "dashboard-5-webhooks");

  // Sign out: back to the sign-in view.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForSelector("#signin");
});
