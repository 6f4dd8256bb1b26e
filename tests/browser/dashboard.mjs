// Scenario: a merchant signs in on /dashboard/developers with Sign-In with Ethereum,
// generates an API key and sees it exactly once, rotates it in the UI (the old key fails with
// 401, the new one works), sets a webhook URL (a local receiver), rotates the signing secret,
// sends a test event that fails once, retries it from the deliveries list, revokes the key
// and signs out.
// env: BASE_URL, RPC_URL, CHAIN_ID, MERCHANT, SCREENSHOT_DIR.
import { createHmac } from "node:crypto";
import { createServer } from "node:http";
import { axeClean, check, env, fitsWidth, run, screenshot, walletPage } from "./lib.mjs";

const base = env("BASE_URL");
const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);
const merchant = env("MERCHANT");

async function apiStatus(key) {
  const res = await fetch(base + "/api/v1/plans", { headers: { authorization: "Bearer " + key } });
  return res.status;
}

async function statusIs(page, text) {
  await page.waitForFunction((t) => document.getElementById("status").textContent === t, text);
}

// Polls a Node-side condition (at most 30 s: a bound against hangs, not a timing check).
async function until(what, cond) {
  for (let i = 0; i < 150; i++) {
    if (cond()) return;
    await new Promise((r) => setTimeout(r, 200));
  }
  throw new Error("gave up waiting for " + what);
}

// Clicks the deliveries' Refresh button until `cond` holds.
async function refreshUntil(page, cond) {
  for (let i = 0; i < 150; i++) {
    if (await cond().catch(() => false)) return;
    await page.getByRole("button", { name: "Refresh" }).click();
    await page.waitForTimeout(200);
  }
  throw new Error("the deliveries list never showed the expected state");
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

  // Webhooks: a local receiver that fails the first delivery and accepts the next.
  const received = [];
  const receiver = createServer((req, res) => {
    let body = "";
    req.on("data", (c) => (body += c));
    req.on("end", () => {
      received.push({ headers: req.headers, body });
      res.statusCode = received.length === 1 ? 500 : 204;
      res.end();
    });
  });
  await new Promise((r) => receiver.listen(0, "127.0.0.1", r));
  try {
    const hookUrl = `http://127.0.0.1:${receiver.address().port}/hook`;
    await page.getByLabel("Endpoint URL").fill(hookUrl);
    await page.getByRole("button", { name: "Save URL" }).click();
    await statusIs(page, "Webhook URL saved.");
    await page.reload();
    check((await page.getByLabel("Endpoint URL").inputValue()) === hookUrl, "the URL is stored");

    await page.getByRole("button", { name: "Rotate secret" }).click();
    await page.waitForFunction(() => document.getElementById("secret-value").value.startsWith("whsec_"));
    const secret = await page.locator("#secret-value").inputValue();
    // The previous secret would sign too until its overlap ends; end it now.
    await page.getByRole("button", { name: "End the previous secret now" }).click();
    await statusIs(page, "The previous secret no longer signs.");
    check(await page.locator("#secret-revoke-previous").isHidden(), "nothing left to end");

    await page.getByRole("button", { name: "Send test event" }).click();
    await until("the first delivery attempt", () => received.length >= 1);
    const row = page.locator("#deliveries tbody tr[data-delivery]").first();
    // The failed attempt shows in the list (refresh until the dispatcher has recorded it).
    await refreshUntil(page, async () => (await row.locator("td").nth(3).textContent()) === "1");
    check((await row.textContent()).includes("webhook.test"), "test delivery listed");
    await screenshot(page, "dashboard-5-webhook-failed-once");

    // Retry from the dashboard: delivered, same webhook-id, signed with the shown secret.
    await row.getByRole("button", { name: /^Retry delivery/ }).click();
    await until("the retried delivery", () => received.length >= 2);
    await refreshUntil(page, async () => (await row.locator("td").nth(2).textContent()) === "delivered");
    const [a, b] = received;
    check(a.headers["webhook-id"] === b.headers["webhook-id"], "a retry keeps the webhook-id");
    check(a.headers["webhook-id"].startsWith("evt_test_"), `webhook-id: ${a.headers["webhook-id"]}`);
    const key = Buffer.from(secret.slice("whsec_".length), "base64");
    const signed = `${b.headers["webhook-id"]}.${b.headers["webhook-timestamp"]}.${b.body}`;
    const expected = "v1," + createHmac("sha256", key).update(signed).digest("base64");
    check(b.headers["webhook-signature"].split(" ").includes(expected), "signed with the dashboard's secret");
    check(b.headers["webhook-signature"].split(" ").length === 1, "and with no other (the previous one ended)");
    await screenshot(page, "dashboard-6-webhook-retried");
    // Times read as dates, the exact time on hover; the deliveries fit their card on a
    // phone and on a desktop (the table scrolls inside it, not the page).
    const created = row.locator("td time");
    check(/^\d{4}-\d{2}-\d{2} \d{2}:\d{2} UTC$/.test(await created.textContent()), `created: ${await created.textContent()}`);
    check(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}/.test(await created.getAttribute("title")), "the exact time on hover");
    for (const width of [1280, 390]) {
      await fitsWidth(page, width, "dashboard-developers");
      await axeClean(page, `developers at ${width}px`);
      const [card, table] = await page.evaluate(() => [document.getElementById("deliveries-card").getBoundingClientRect().right, document.querySelector("#deliveries-card .table-scroll").getBoundingClientRect().right]);
      check(table <= card, `the deliveries stay in their card at ${width}px: ${table} > ${card}`);
    }
    await page.setViewportSize({ width: 900, height: 1000 });
  } finally {
    receiver.close();
  }

  // Revoke (with confirmation): no key is left and the last one fails.
  await page.getByRole("button", { name: "Revoke key" }).click();
  await page.getByRole("button", { name: "Revoke now" }).click();
  await statusIs(page, "Key revoked. API calls with it now fail.");
  check((await page.locator("#key-status").textContent()).startsWith("No API key"), "no key after revoke");
  check(await page.getByRole("button", { name: "Generate key" }).isVisible(), "generate offered again");
  check((await apiStatus(second)) === 401, "the revoked key is rejected with 401");

  // Sign out: back to the sign-in view.
  await page.getByRole("button", { name: "Sign out" }).click();
  await page.waitForSelector("#signin");
});
