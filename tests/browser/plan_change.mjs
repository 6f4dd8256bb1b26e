// Scenario: a customer opens a plan-change link a merchant made (/account/plan-change/…).
// env: LINK_URL, RPC_URL, CHAIN_ID, CUSTOMER (the subscriber), STRANGER, SCREENSHOT_DIR.
// A stranger's wallet is refused the call (nothing sent); the subscriber reads the terms,
// confirms, and its wallet sends the one `changePlan` transaction. The page fits 390 and
// 1280 px and passes axe-core (nothing serious).
import { axeClean, check, env, fitsWidth, run, screenshot, waitState, walletPage } from "./lib.mjs";

const url = env("LINK_URL");
const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);
const state = (page, s, timeout) => waitState(page, "plan-change", s, timeout);

await run("plan_change", async (browser) => {
  {
    const { page, wallet, context } = await walletPage(browser, { rpcUrl, account: env("STRANGER"), chainIdHex });
    await page.goto(url);
    await state(page, "idle");
    await page.getByRole("button", { name: "Connect wallet" }).click();
    await state(page, "ready");
    await page.getByRole("button", { name: "Confirm the change" }).click();
    const refused = await state(page, "error");
    check(refused.includes("not this subscription's subscriber"), `stranger refused: ${refused}`);
    check(!wallet.calls.includes("eth_sendTransaction"), "nothing sent for a stranger");
    await context.close();
  }
  const { page, wallet, context } = await walletPage(browser, { rpcUrl, account: env("CUSTOMER"), chainIdHex });
  await page.goto(url);
  const terms = await page.locator("#terms").textContent();
  check(terms.includes("From 9.99 to 19.99 USDC a month, at once"), `terms: ${terms}`);
  await page.getByRole("button", { name: "Connect wallet" }).click();
  await state(page, "ready");
  await screenshot(page, "plan-change-1-ready");
  // The page fits a phone and a desktop, and axe finds nothing serious.
  for (const width of [390, 1280]) {
    await fitsWidth(page, width, "plan-change");
    await axeClean(page, `plan change at ${width}px`);
  }
  await page.getByRole("button", { name: "Confirm the change" }).click();
  const done = await state(page, "confirmed", 60000);
  check(done.includes("plan change is on chain"), `confirmed: ${done}`);
  check(wallet.calls.filter((m) => m === "eth_sendTransaction").length === 1, "one transaction");
  await screenshot(page, "plan-change-2-confirmed");
  await context.close();
});
