// Scenario: a customer manages subscriptions on the self-service page (/account).
// env: ACCOUNT_URL (…/account?merchant=code), RPC_URL, CHAIN_ID, CUSTOMER (subscribed once,
//      to PLAN_NAME), STRANGER (no subscriptions), PLAN_NAME, EXPLORER_PREFIX, SCREENSHOT_DIR.
// Walks the states: no wallet; a wallet with no subscriptions on the wrong chain -> switch ->
// signs the challenge -> empty; the subscriber: signature refused (nothing listed) -> signs ->
// list (plan, amount, next charge, the first charge with its
// transaction link) -> changes plan: an upgrade (confirmed, listed on the new plan with its
// prorated charge) and a downgrade (listed as scheduled, undone, scheduled again) -> cancel at period end rejected
// (nothing sent) -> confirmed, the list
// shows it ending -> cancel now -> pending (mining paused) -> confirmed, the list shows it cancelled with no actions.
import { axeClean, check, env, fitsWidth, rpc, run, screenshot, waitState, walletPage } from "./lib.mjs";

const url = env("ACCOUNT_URL");
const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);
const customer = env("CUSTOMER");
const stranger = env("STRANGER");

const state = (page, s, timeout) => waitState(page, "account", s, timeout);

await run("account", async (browser) => {
  // 0. No wallet: the page says what to install.
  {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(url);
    const msg = await state(page, "no-wallet");
    check(msg.includes("No browser wallet found"), `no-wallet message: ${msg}`);
    check(await page.locator("#connect").isHidden(), "no connect button without a wallet");
    await context.close();
  }

  // 1. A wallet with no subscriptions, on the wrong chain.
  {
    const { page, context } = await walletPage(browser, { rpcUrl, account: stranger, chainIdHex: "0x1" });
    await page.goto(url);
    await state(page, "idle");
    await page.getByRole("button", { name: "Connect wallet" }).click();
    const wrong = await state(page, "wrong-chain");
    check(wrong.includes("wrong network"), `wrong-chain message: ${wrong}`);
    await page.getByRole("button", { name: "Switch network" }).click();
    // The wallet signs the challenge (anvil's personal_sign), then the list comes.
    const empty = await state(page, "empty");
    check(empty.includes("no subscriptions"), `empty message: ${empty}`);
    check((await page.locator("li.sub").count()) === 0, "nothing listed for a stranger");
    await screenshot(page, "account-1-empty");
    await context.close();
  }

  // 2. The subscriber.
  const { page, wallet, context } = await walletPage(browser, { rpcUrl, account: customer, chainIdHex });
  await page.goto(url);
  // Refusing to sign shows nothing; signing lists.
  wallet.rejectNext = true;
  await page.getByRole("button", { name: "Connect wallet" }).click();
  const refused = await state(page, "rejected");
  check(refused.includes("rejected the signature"), `rejected message: ${refused}`);
  check((await page.locator("li.sub").count()) === 0, "nothing listed without the signature");
  await page.getByRole("button", { name: "Refresh" }).click();
  await state(page, "list");
  check(wallet.calls.filter((m) => m === "personal_sign").length === 2, "one refused and one given signature");
  const sub = page.locator("li.sub");
  check((await sub.count()) === 1, "one subscription listed");
  check((await sub.getAttribute("data-status")) === "active", "active");
  const text = await sub.textContent();
  check(text.includes(env("PLAN_NAME")) && text.includes("9.99 USDC"), `plan and amount: ${text}`);
  check(/Next charge\d{4}-\d{2}-\d{2}/.test(text), `next charge date: ${text}`);
  check((await sub.locator('tr[data-kind="charge"]').count()) === 1, "the first charge in the ledger");
  const href = await sub.locator('tr[data-kind="charge"] a').getAttribute("href");
  check(href.startsWith(env("EXPLORER_PREFIX") + "0x") && href.length === env("EXPLORER_PREFIX").length + 66, `ledger tx link: ${href}`);
  await screenshot(page, "account-2-list");

  // Change plan: the merchant's two other plans are offered, the dearer one now (prorated).
  const options = await sub.locator('select[data-action="plan-choice"] option').allTextContents();
  check(options.length === 2, `two plans to change to: ${options}`);
  check(options.some((o) => o.startsWith("Team · 19.99 USDC / month (now, prorated)")), `upgrade offered: ${options}`);
  check(options.some((o) => o.startsWith("Basic · 4.99 USDC / month (from the next renewal)")), `downgrade offered: ${options}`);
  const choose = async (name) => {
    const value = await sub.locator('select[data-action="plan-choice"] option', { hasText: name }).getAttribute("value");
    await sub.locator('select[data-action="plan-choice"]').selectOption(value);
    await sub.locator('button[data-action="change-plan"]').click();
  };
  const sendsBefore = wallet.calls.filter((m) => m === "eth_sendTransaction").length;
  await choose("Team");
  const upgraded = await state(page, "confirmed", 60000);
  check(upgraded.includes("plan change"), `upgrade confirmed: ${upgraded}`);
  await page.waitForSelector('#account[data-indexed="true"]', { timeout: 60000 });
  const afterUpgrade = await sub.textContent();
  check(afterUpgrade.includes("Team · 19.99 USDC"), `on Team now: ${afterUpgrade}`);
  check((await sub.locator('tr[data-kind="proration"]').count()) === 1, "the prorated charge in the ledger");
  await screenshot(page, "account-2b-upgraded");
  // Team is now its plan: the other two (Pro Monthly and Basic) are offered, both later.
  await choose("Basic");
  await state(page, "confirmed", 60000);
  await page.waitForSelector('#account[data-indexed="true"]', { timeout: 60000 });
  const scheduled = await sub.textContent();
  check(/Plan changeTo Basic at 4\.99 USDC \/ month from \d{4}-\d{2}-\d{2}/.test(scheduled), `downgrade scheduled: ${scheduled}`);
  check(scheduled.includes("Team · 19.99 USDC"), `still on Team until the renewal: ${scheduled}`);
  await screenshot(page, "account-2c-downgrade-scheduled");
  // On a phone the list fits: the connected wallet and the transactions wrap.
  for (const width of [390, 1280]) {
    await fitsWidth(page, width, "account-list");
    await axeClean(page, `account at ${width}px`);
  }
  await page.setViewportSize({ width: 900, height: 1000 });
  // Undone from the page, then scheduled again.
  await sub.locator('button[data-action="keep-plan"]').click();
  await state(page, "confirmed", 60000);
  await page.waitForSelector('#account[data-indexed="true"]', { timeout: 60000 });
  check(!(await sub.textContent()).includes("Plan change"), "the downgrade undone");
  check((await sub.locator('button[data-action="keep-plan"]').count()) === 0, "nothing to undo");
  await choose("Basic");
  await state(page, "confirmed", 60000);
  await page.waitForSelector('#account[data-indexed="true"]', { timeout: 60000 });
  check((await sub.textContent()).includes("Plan changeTo Basic"), "scheduled again");
  check(wallet.calls.filter((m) => m === "eth_sendTransaction").length === sendsBefore + 4, "one transaction per change");

  // Rejected in the wallet: nothing sent, the subscription unchanged.
  wallet.rejectNext = true;
  await sub.locator('button[data-action="cancel-at-period-end"]').click();
  const rejected = await state(page, "rejected");
  check(rejected.includes("rejected"), `rejected message: ${rejected}`);
  await screenshot(page, "account-3-rejected");

  // Cancel at period end: one transaction, confirmed, then the list (from the index) shows it.
  const sends = () => wallet.calls.filter((m) => m === "eth_sendTransaction").length;
  const before = sends();
  await page.locator('li.sub button[data-action="cancel-at-period-end"]').click();
  const ending = await state(page, "confirmed", 60000);
  check(ending.includes("ends at the end of its current period"), `confirmed message: ${ending}`);
  check(sends() === before + 1, "one transaction sent");
  await page.waitForSelector('#account[data-indexed="true"]', { timeout: 60000 });
  check((await page.locator("li.sub").getAttribute("data-cancelling")) === "true", "listed as ending");
  check((await page.locator('li.sub button[data-action="cancel-at-period-end"]').count()) === 0, "no second cancel at period end offered");
  check((await page.locator("li.sub").textContent()).includes("Next chargenone"), "no next charge once ending");
  await screenshot(page, "account-4-ending");
  console.log(`cancel at period end tx: ${await page.locator("#status").getAttribute("data-tx")}`);

  // Cancel now, with mining paused: the page says it is pending until the block comes.
  await rpc(rpcUrl, "evm_setAutomine", [false]);
  await page.locator('li.sub button[data-action="cancel-now"]').click();
  const pending = await state(page, "pending");
  check(pending.includes("Pending"), `pending message: ${pending}`);
  check(await page.locator('li.sub button[data-action="cancel-now"]').isDisabled(), "no second cancel while one is pending");
  await screenshot(page, "account-5-pending");
  await rpc(rpcUrl, "evm_setAutomine", [true]);
  await rpc(rpcUrl, "evm_mine", []);
  const cancelled = await state(page, "confirmed", 60000);
  check(cancelled.includes("is cancelled"), `confirmed message: ${cancelled}`);
  await page.waitForSelector('#account[data-indexed="true"]', { timeout: 60000 });
  check((await page.locator("li.sub").getAttribute("data-status")) === "cancelled", "listed as cancelled");
  check((await page.locator("li.sub button").count()) === 0, "nothing to cancel any more");
  check(sends() === before + 2, "two transactions in all");
  check(wallet.calls.filter((m) => m === "personal_sign").length === 2, "no new signature for the refreshes");
  await screenshot(page, "account-6-cancelled");
  console.log(`cancel tx: ${await page.locator("#status").getAttribute("data-tx")}`);
  await context.close();
});
