// Scenario: the service refuses to prepare a payment (issue 11, point 5) — the plan on chain
// differs from the link (PLAN_MISMATCH), or the plan was deactivated. The page shows a clear
// state and no button that could send anything; the wallet is never asked to sign. The page
// fits 390 and 1280 px and passes axe-core (nothing serious).
// env: CHECKOUT_URL, RPC_URL, CHAIN_ID, CUSTOMER, EXPECT (refused | inactive), SCREENSHOT_DIR.
import { axeClean, check, env, fitsWidth, run, screenshot, walletPage } from "./lib.mjs";

const url = env("CHECKOUT_URL");
const expected = env("EXPECT");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);

await run(`checkout-${expected}`, async (browser) => {
  const { page, wallet, context } = await walletPage(browser, {
    rpcUrl: env("RPC_URL"),
    account: env("CUSTOMER"),
    chainIdHex,
  });
  await page.goto(url);
  await page.getByRole("button", { name: "Connect wallet" }).click();
  await page.waitForSelector(`#checkout[data-state="${expected}"]`, { timeout: 30000 });
  const msg = await page.locator("#status").textContent();
  if (expected === "refused") {
    check(msg.includes("No transaction was prepared"), `refused message: ${msg}`);
  } else {
    check(msg.includes("no longer accepts new subscriptions"), `inactive message: ${msg}`);
  }
  check(await page.locator("#subscribe").isHidden(), "no subscribe button");
  check(!wallet.calls.includes("eth_sendTransaction"), `the wallet was never asked to send: ${wallet.calls}`);
  await screenshot(page, `checkout-${expected}`);
  for (const width of [390, 1280]) {
    await fitsWidth(page, width, `checkout-${expected}`);
    await axeClean(page, `refused checkout at ${width}px`);
  }
  await context.close();
});
