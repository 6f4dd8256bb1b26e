// Scenario: a merchant signs in on /dashboard/plans and creates a plan with a 7-day trial
// while the chain mines nothing: the page says the transaction is sent and the plan is
// provisioning; once a block is mined the page shows it active (without a reload), as the
// API does. It makes a checkout link for a customer and copies it, names itself on the
// developers page (the checkout then shows the name); then deactivates the plan
// with its own wallet: the page shows it deactivated once indexed, the link's plan is gone
// from the checkout-link choices, and a second deactivation is refused (409). The page fits
// 1280 px and 390 px, logs no console error and passes axe-core (nothing serious).
// env: BASE_URL, RPC_URL, CHAIN_ID, MERCHANT, API_KEY, SCREENSHOT_DIR.
import { axeClean, check, env, fitsWidth, merchantApi, rpc, run, screenshot, text, walletPage } from "./lib.mjs";

const base = env("BASE_URL");
const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);
const key = env("API_KEY");

const api = merchantApi(base, key);

await run("plans", async (browser) => {
  const { page, context, wallet } = await walletPage(browser, { rpcUrl, account: env("MERCHANT"), chainIdHex });
  await context.grantPermissions(["clipboard-read", "clipboard-write"], { origin: base });
  const errors = [];
  page.on("console", (m) => { if (m.type() === "error") errors.push(m.text()); });
  page.on("pageerror", (e) => errors.push(e.message));
  page.on("dialog", (d) => d.accept());

  await page.goto(base + "/dashboard/plans");
  check((await text(page, "h1")) === "Plans", "the signed-out view is the plans page's");
  await page.getByRole("button", { name: "Sign in with Ethereum" }).click();
  await page.waitForSelector("#create-form");
  check((await page.locator("#plans tbody tr[data-plan-id]").count()) === 1, "the plan made before is listed");

  // The chain holds its blocks: the plan is sent, and stays provisioning.
  await rpc(rpcUrl, "evm_setAutomine", [false]);
  await page.fill("#plan-name", "Starter");
  await page.fill("#plan-amount", "4.99");
  await page.fill("#plan-trial", "7");
  await page.getByRole("button", { name: "Create on chain" }).click();
  await page.waitForSelector('#create[data-state="provisioning"]', { timeout: 60000 });
  const row = page.locator("#plans tbody tr[data-plan-id]").first();
  const planId = await row.getAttribute("data-plan-id");
  check((await row.locator(".plan-state").getAttribute("data-status")) === "pending", "listed as provisioning");
  check((await api("/api/v1/plans/" + planId)).status === "pending", "pending in the API too");
  await screenshot(page, "plans-provisioning");
  // A block: the index has it, and the page follows.
  await rpc(rpcUrl, "evm_mine", []);
  await rpc(rpcUrl, "evm_setAutomine", [true]);
  await page.waitForSelector('#create[data-state="created"]', { timeout: 60000 });
  const plan = await api("/api/v1/plans/" + planId);
  check(plan.status === "active" && plan.trialDays === 7 && plan.amount === "4.99", `active in the API: ${JSON.stringify(plan)}`);
  check((await text(page, `#plans tr[data-plan-id="${planId}"] .plan-state`)) === `active (block ${plan.chain.blockNumber})`, "active on the page, with its block");
  check((await text(page, "#create-status")).includes(`plan ${plan.chain.onchainPlanId}`), "the on-chain plan id said");

  // A checkout link for a customer, copied.
  await page.selectOption("#link-plan", planId);
  await page.fill("#link-customer", "cust_starter");
  await page.getByRole("button", { name: "Make link" }).click();
  await page.waitForSelector('#link[data-state="made"]');
  const url = await page.locator("#link-url").inputValue();
  check(url.startsWith(base + "/checkout/") && url.includes("/" + plan.slug) && url.includes("cust_starter"), `checkout link: ${url}`);
  await page.getByRole("button", { name: "Copy" }).click();
  await page.waitForSelector('#link[data-state="copied"]');
  check((await page.evaluate(() => navigator.clipboard.readText())) === url, "the link is on the clipboard");

  // The name customers see, set on the developers page: a bidirectional override is
  // refused; a plain name is saved and the checkout shows it.
  await page.goto(base + "/dashboard/developers");
  await page.fill("#display-name", "Acme \u202Eduolc");
  await page.getByRole("button", { name: "Save name" }).click();
  await page.waitForFunction(() => document.getElementById("status").textContent.includes("bidirectional"));
  await page.fill("#display-name", "Acme Cloud");
  await page.getByRole("button", { name: "Save name" }).click();
  await page.waitForFunction(() => document.getElementById("status").textContent.includes("Customers now see Acme Cloud"));
  await page.reload();
  check((await page.locator("#display-name").inputValue()) === "Acme Cloud", "the name is kept");
  errors.length = 0; // the refused name's 400
  const customerPage = await context.newPage();
  await customerPage.goto(url);
  check((await text(customerPage, "#merchant-name")) === "Acme Cloud", "the checkout names the merchant");
  await customerPage.close();
  await page.goto(base + "/dashboard/plans");

  for (const width of [1280, 390]) {
    await page.setViewportSize({ width, height: 900 });
    await fitsWidth(page, width, "plans");
    await axeClean(page, `plans at ${width}px`);
  }
  await page.setViewportSize({ width: 1280, height: 900 });

  // Deactivated with the merchant's wallet.
  const sent = wallet.calls.filter((m) => m === "eth_sendTransaction").length;
  await page.getByRole("button", { name: "Deactivate Starter" }).click();
  await page.waitForSelector('#plans[data-state="deactivated"]', { timeout: 60000 });
  check(wallet.calls.filter((m) => m === "eth_sendTransaction").length === sent + 1, "the wallet sent one transaction");
  const gone = await api("/api/v1/plans/" + planId);
  check(gone.status === "deactivated" && gone.deactivation && /^0x[0-9a-f]{64}$/.test(gone.deactivation.transactionHash), `deactivated in the API: ${JSON.stringify(gone)}`);
  check((await page.locator(`#plans tr[data-plan-id="${planId}"] .plan-state`).getAttribute("data-status")) === "deactivated", "deactivated on the page");
  check((await page.locator(`#link-plan option[value="${planId}"]`).count()) === 0, "no checkout link for it any more");
  check((await page.getByRole("button", { name: "Deactivate Starter" }).count()) === 0, "no second deactivation offered");
  // Asked again anyway: refused, nothing to sign.
  const again = await page.evaluate(async (id) => {
    const s = JSON.parse(document.getElementById("plans-settings").textContent);
    const res = await fetch("/dashboard/api/plans/" + id + "/deactivation", {
      method: "POST", headers: { "content-type": "application/json", [s.csrfHeader]: s.csrfToken }, body: "{}",
    });
    return [res.status, (await res.json()).error.code];
  }, planId);
  check(again[0] === 409 && again[1] === "plan_inactive", `a second deactivation: ${again}`);
  // After a reload the server renders the same.
  await page.reload();
  check((await page.locator(`#plans tr[data-plan-id="${planId}"] .plan-state`).getAttribute("data-status")) === "deactivated", "deactivated after a reload");
  await screenshot(page, "plans-deactivated");
  // The browser logs the refused request's 409 itself; nothing else.
  check(errors.every((e) => e.includes("status of 409")), `console errors: ${errors}`);
  await context.close();
});
