// Scenario: a merchant signs in on /dashboard and reads the overview, at 1280 px and at
// 390 px: every figure equals the reporting API's (GET /api/v1/reports/summary and
// /revenue, read with the merchant's key); each figure links to the subscriptions it counts.
// It finds the customer's subscription in the list (by customer id), opens it (ledger with
// explorer links and confirmations, events with their webhooks), refunds 1.50 USDC with its
// own wallet, makes a plan-change link for the customer and cancels at period end. Every page fits the screen at both widths (no horizontal scrolling), logs
// no console error, and an axe-core scan finds no serious or critical accessibility
// violation.
// env: BASE_URL, RPC_URL, CHAIN_ID, MERCHANT, API_KEY, CUSTOMER_ID, EXPLORER_PREFIX,
//      SCREENSHOT_DIR.
import { axeClean, check, env, fitsWidth, merchantApi, run, screenshot, text, walletPage } from "./lib.mjs";

const base = env("BASE_URL");
const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);
const key = env("API_KEY");

const api = merchantApi(base, key);

// The page at `width`: it fits (no horizontal overflow) and axe finds nothing serious.
async function fitsAndPassesAxe(page, width, name) {
  await fitsWidth(page, width, name);
  await axeClean(page, `${name} at ${width}px`);
}

await run("overview", async (browser) => {
  const { page, context, wallet } = await walletPage(browser, { rpcUrl, account: env("MERCHANT"), chainIdHex });
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(e.message));

  // Signed out: the overview offers sign-in; signing in shows the figures.
  await page.goto(base + "/dashboard");
  check((await text(page, "h1")) === "Overview", "the signed-out view is the overview's");
  await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
  await page.waitForSelector("#figures");

  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: 900 });
    await page.reload();
    await page.waitForSelector("#figures");
    const summary = await api("/api/v1/reports/summary");
    const figure = (id) => text(page, `[data-figure="${id}"] .figure-value`);
    const tally = (t) => `${t.count} · ${t.amount} USDC`;
    check((await figure("mrr")) === summary.mrr.amount + " USDC", `MRR ${await figure("mrr")} vs ${summary.mrr.amount}`);
    check((await figure("trial-mrr")) === summary.trialMrr.amount + " USDC", "trial MRR");
    check((await figure("renewals-7")) === tally(summary.renewalsNext7Days), `renewals in 7 days: ${await figure("renewals-7")}`);
    check((await figure("renewals-30")) === tally(summary.renewalsNext30Days), "renewals in 30 days");
    check((await figure("at-risk")) === tally(summary.atRisk), "at risk");
    check((await figure("failing")) === tally(summary.failedAwaitingRetry), "failing");
    check((await text(page, '[data-figure="started-30"]')) === String(summary.startedLast30Days), "started");
    check((await text(page, '[data-figure="stopped-30"]')) === String(summary.stoppedLast30Days), "stopped");
    const states = { Trialing: "trialing", Active: "active", "Past due": "pastDue", Cancelling: "cancelling", Cancelled: "cancelled", Ended: "ended" };
    for (const [label, field] of Object.entries(states)) {
      const shown = await text(page, `#status-table tr[data-status="${label}"] td`);
      check(shown === String(summary.subscriptions[field]), `${label}: ${shown} vs ${summary.subscriptions[field]}`);
    }
    // The revenue: the twelve months to the current one, month by month.
    const months = await page.locator("#revenue-table tbody tr").evaluateAll((rows) => rows.map((r) => [r.dataset.month, [...r.querySelectorAll("td")].map((td) => td.textContent)]));
    check(months.length === 12, `twelve months: ${months.length}`);
    const revenue = await api(`/api/v1/reports/revenue?from=${months[0][0]}&to=${months[11][0]}`);
    for (const [i, [month, cells]] of months.entries()) {
      const r = revenue.data[i];
      check(month === r.month, `month ${month} vs ${r.month}`);
      check(JSON.stringify(cells) === JSON.stringify([r.charges.amount, r.prorations.amount, r.refunds.amount, r.net.amount]), `${month}: ${cells} vs ${JSON.stringify(r)}`);
    }
    check((await text(page, '[data-figure="revenue-total"]')) === revenue.total.net.amount + " USDC", "twelve months' total");
    check(Number(revenue.total.net.baseUnits) > 0, "the scene has revenue");
    // Two charts, each a labelled image with one labelled bar per value.
    // The change over 30 days, and the live subscriptions by week.
    const change = (label) => text(page, `#status-table tr[data-status="${label}"] td:nth-child(3)`);
    const signed = (n) => (n > 0 ? "+" + n : String(n));
    for (const [label, field] of Object.entries({ ...states, Live: "live" })) {
      check((await change(label)) === signed(summary.changeLast30Days[field]), `${label} over 30 days: ${await change(label)} vs ${summary.changeLast30Days[field]}`);
    }
    const weeks = await page.locator("#week-table tbody tr").evaluateAll((rows) => rows.map((r) => [r.dataset.week, ...[...r.querySelectorAll("td")].map((td) => Number(td.textContent))]));
    check(JSON.stringify(weeks) === JSON.stringify(summary.liveByWeek.map((w) => [w.weekEnding, w.live, w.started, w.stopped])), `weeks: ${JSON.stringify(weeks)} vs ${JSON.stringify(summary.liveByWeek)}`);
    check((await page.locator("#week-chart g.bar text.value").count()) === 12, "a value on every week's bar");
    check((await page.locator("svg.chart[role=img] title").count()) === 3, "three labelled charts");
    check((await page.locator("#revenue-chart g.bar text.value").count()) === 12, "a value on every month's bar");

    await fitsAndPassesAxe(page, width, "overview");
  }

  // Each figure links to the list it counts.
  const href = await page.locator('[data-figure="failing"]').getAttribute("href");
  check(href === "/dashboard/subscriptions?status=past_due", `failing links to its list: ${href}`);

  // The list, searched by customer id; then the subscription.
  const customerId = env("CUSTOMER_ID");
  await page.getByRole("link", { name: "Subscriptions", exact: true }).click();
  await page.waitForSelector("#subscriptions");
  await page.fill("#customer", customerId);
  await page.getByRole("button", { name: "Show" }).click();
  await page.waitForURL(/customer=/);
  const rows = page.locator("#subscriptions tbody tr[data-id]");
  check((await rows.count()) === 1, `one subscription for ${customerId}`);
  const subId = await rows.first().getAttribute("data-id");
  // The subscriber's wallet finds it too.
  const subscriber = (await text(page, `#subscriptions tr[data-id="${subId}"] code.wallet`)).trim();
  await page.fill("#customer", subscriber.toLowerCase());
  await page.getByRole("button", { name: "Show" }).click();
  await page.waitForURL(/customer=0x/);
  check((await page.locator("#subscriptions tbody tr[data-id]").count()) === 1, `found by wallet ${subscriber}`);
  await page.fill("#customer", "nobody-" + customerId);
  await page.getByRole("button", { name: "Show" }).click();
  await page.waitForURL(/customer=nobody/);
  check((await page.locator("#subscriptions tbody tr[data-id]").count()) === 0, "no subscription for another customer");
  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: 900 });
    await page.goto(base + "/dashboard/subscriptions?status=active");
    check((await page.locator(`#subscriptions tr[data-id="${subId}"]`).count()) === 1, "listed as active");
    await fitsAndPassesAxe(page, width, "subscriptions");
    await page.goto(base + "/dashboard/subscriptions/" + subId);
    await page.waitForSelector("#ledger");
    await fitsAndPassesAxe(page, width, "subscription");
  }
  const apiSub = await api("/api/v1/subscriptions/" + subId);
  const charge = apiSub.ledger.find((e) => e.type === "charge");
  const link = await page.locator('#ledger tr[data-kind="charge"] a').getAttribute("href");
  check(link === env("EXPLORER_PREFIX") + charge.chain.transactionHash, `explorer link ${link}`);
  check(/\d+ (\(final\)|of \d+)/.test(await text(page, '#ledger tr[data-kind="charge"] td:last-child')), "confirmations shown");
  check((await page.locator("#events tbody tr").count()) >= 2, "the subscription's events");
  const exact = await page.locator("#ledger time").first().getAttribute("title");
  check(/^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}/.test(exact), `the exact time on hover: ${exact}`);

  // A refund from the merchant's own wallet: too much is refused without asking the wallet,
  // 1.50 is sent (an approval, then the refund).
  check(errors.length === 0, `console errors: ${errors}`);
  await page.fill("#refund-amount", "100.00");
  await page.getByRole("button", { name: "Refund with my wallet" }).click();
  await page.waitForSelector('#refund[data-state="refused"]');
  // The browser logs the refusal's 400 itself; nothing else.
  check(errors.length === 1 && errors[0].includes("status of 400"), `only the refusal's 400: ${errors}`);
  errors.length = 0;
  check(wallet.calls.filter((m) => m === "eth_sendTransaction").length === 0, "nothing sent for a refund too large");
  await page.fill("#refund-amount", "1.50");
  await page.getByRole("button", { name: "Refund with my wallet" }).click();
  await page.waitForSelector('#refund[data-state="confirmed"]', { timeout: 60000 });
  check(wallet.calls.filter((m) => m === "eth_sendTransaction").length >= 1, "the wallet sent the refund");
  await screenshot(page, "subscription-refunded");
  // The ledger shows it once indexed.
  for (let i = 0; i < 60; i++) {
    await page.reload();
    if ((await page.locator('#ledger tr[data-kind="refund"]').count()) === 1) break;
    await page.waitForTimeout(500);
  }
  check((await text(page, '#ledger tr[data-kind="refund"] td:nth-child(3)')) === "−1.50 USDC", "the refund in the ledger");

  // A plan-change link for the customer, then a cancellation at period end through the
  // service; the page shows it once indexed.
  await page.selectOption("#plan-change-plan", { label: "Team · 19.99 USDC" });
  await page.getByRole("button", { name: "Make a plan-change link" }).click();
  await page.waitForSelector('#actions[data-state="link"]');
  const linkUrl = await page.locator("#plan-change-url").inputValue();
  check(linkUrl.startsWith(base + "/account/plan-change/") && linkUrl.includes("sig="), `plan-change link: ${linkUrl}`);
  await page.getByRole("button", { name: "Cancel at period end" }).click();
  await page.waitForSelector('#actions[data-state="sent"]', { timeout: 60000 });
  for (let i = 0; i < 60; i++) {
    await page.reload();
    if ((await text(page, "#state")).includes("ending")) break;
    await page.waitForTimeout(500);
  }
  check((await text(page, "#state")).startsWith("active, ending "), `ending: ${await text(page, "#state")}`);
  check((await page.locator("#cancel-at-period-end").count()) === 0, "no second cancel at period end offered");
  check((await page.locator("#plan-change-make").count()) === 0, "an ending subscription changes plan no more");
  await screenshot(page, "subscription-ending");
  check(errors.length === 0, `console errors: ${errors}`);
  console.log(`refunded ${subId}`);
  await context.close();
});
