// Scenario: a plan with a free trial, in the browser. MODE=checkout: the checkout link states
// the trial plainly, the step says nothing is charged, one permit signature and one
// transaction start it. MODE=account: the self-service page lists the subscription as a free
// trial with its end. Both pages fit 390 and 1280 px and pass axe-core (nothing serious).
// env: MODE, URL (the checkout link or /account?merchant=…), RPC_URL, CHAIN_ID, CUSTOMER,
//      SCREENSHOT_DIR.
import { axeClean, check, env, fitsWidth, run, screenshot, waitState, walletPage } from "./lib.mjs";

const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);

// Each page fits a phone and a desktop, and axe finds nothing serious.
async function fitsAndPassesAxe(page, name) {
  for (const width of [390, 1280]) {
    await fitsWidth(page, width, name.replace(" ", "-"));
    await axeClean(page, `${name} at ${width}px`);
  }
}

await run("trial", async (browser) => {
  const { page, wallet, context } = await walletPage(browser, { rpcUrl, account: env("CUSTOMER"), chainIdHex });
  await page.goto(env("URL"));
  if (env("MODE") === "checkout") {
    const state = (s, t) => waitState(page, "checkout", s, t);
    const billing = await page.locator("#billing").textContent();
    check(billing.startsWith("Free for 14 days: nothing is charged now."), `billing: ${billing}`);
    check(billing.includes("then 9.99 USDC every calendar month"), `then the price: ${billing}`);
    await page.getByRole("button", { name: "Connect wallet" }).click();
    await state("ready");
    const steps = await page.locator("#steps").textContent();
    check(steps.includes("Start the 14-day free trial (nothing charged now)"), `steps: ${steps}`);
    await screenshot(page, "trial-1-checkout");
    await fitsAndPassesAxe(page, "trial checkout");
    await page.locator("#subscribe").click();
    await state("confirmed", 60000);
    check(wallet.calls.filter((m) => m === "eth_sendTransaction").length === 1, "one transaction");
  } else {
    await page.getByRole("button", { name: "Connect wallet" }).click();
    await waitState(page, "account", "list", 60000);
    const sub = page.locator("li.sub");
    check((await sub.getAttribute("data-status")) === "trialing", "listed as trialing");
    const text = await sub.textContent();
    check(/Free trial until \d{4}-\d{2}-\d{2}/.test(text), `trial end shown: ${text}`);
    check((await sub.locator("tr").count()) === 0, `no payment yet: ${text}`);
    await screenshot(page, "trial-2-account");
    await fitsAndPassesAxe(page, "trial account");
  }
  await context.close();
});
