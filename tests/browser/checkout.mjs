// Scenario: a customer opens a checkout link and subscribes with a browser wallet.
// env: CHECKOUT_URL, RPC_URL, CHAIN_ID, MANAGER (SubscriptionManager), CUSTOMER (funded),
//      POOR_CUSTOMER (no USDC), PLAN_NAME, EXPLORER_PREFIX, SCREENSHOT_DIR.
// Walks the page's states: no wallet; wrong chain -> switch -> insufficient balance (poor wallet);
// ready -> rejected (4001) -> approve pending (mining paused), subscribe rejected -> subscribe -> confirmed (funded
// wallet without typed-data signing: the approve fallback); then already subscribed on a second
// visit; then the one-signature way: permit signature rejected -> signed -> one transaction.
// Also PERMIT_CUSTOMER (funded, no allowance) and PERMIT_CHECKOUT_URL (its own link); the permit
// way also walks a wallet error (shown, no fallback) and a permit grown stale after a rejected
// transaction (a fresh one is fetched, the old one neither sent nor re-signed).
import { axeClean, check, emit, env, fitsWidth, rpc, run, screenshot, waitState, walletPage } from "./lib.mjs";

const url = env("CHECKOUT_URL");
const rpcUrl = env("RPC_URL");
const chainIdHex = "0x" + BigInt(env("CHAIN_ID")).toString(16);
const customer = env("CUSTOMER");
const poor = env("POOR_CUSTOMER");

const state = (page, s, timeout) => waitState(page, "checkout", s, timeout);

await run("checkout", async (browser) => {
  // 0. No wallet at all: the page says what to install, and offers no button that cannot work.
  {
    const context = await browser.newContext();
    const page = await context.newPage();
    await page.goto(url);
    const msg = await state(page, "no-wallet");
    check(msg.includes("No browser wallet found"), `no-wallet message: ${msg}`);
    check(await page.locator("#connect").isHidden(), "no connect button without a wallet");
    await context.close();
  }

  // 1. A wallet on the wrong chain with no USDC.
  {
    const { page, context } = await walletPage(browser, { rpcUrl, account: poor, chainIdHex: "0x1" });
    await page.goto(url);
    check((await page.locator("h1").textContent()) === env("PLAN_NAME"), "plan name is the heading");
    check((await page.locator("#amount").textContent()) === "9.99", "amount shown");
    check((await page.locator("#allowance").textContent()) === "119.88", "requested allowance shown");
    check((await page.locator("main").textContent()).includes("every calendar month"), "interval shown");
    await state(page, "idle");
    await screenshot(page, "checkout-1-link-opened");
    await page.getByRole("button", { name: "Connect wallet" }).click();
    const wrong = await state(page, "wrong-chain");
    check(wrong.includes("wrong network"), `wrong-chain message: ${wrong}`);
    await screenshot(page, "checkout-2-wrong-chain");
    await page.getByRole("button", { name: "Switch network" }).click();
    const poorMsg = await state(page, "insufficient");
    check(poorMsg.includes("Insufficient USDC balance"), `insufficient message: ${poorMsg}`);
    await screenshot(page, "checkout-3-insufficient-balance");
    await context.close();
  }

  // 2. A funded wallet on the right chain that cannot sign typed data (no EIP-2612 permit):
  // the page falls back to approve + subscribe. Reject once, then subscribe.
  {
    const { page, wallet, context } = await walletPage(browser, { rpcUrl, account: customer, chainIdHex, typedData: false });
    await page.goto(url);
    await page.getByRole("button", { name: "Connect wallet" }).click();
    await state(page, "ready");
    check((await page.locator("#steps li").count()) === 2, "approve and subscribe steps listed");
    await screenshot(page, "checkout-4-ready");
    wallet.rejectNext = true;
    await page.locator("#subscribe").click();
    const rejected = await state(page, "rejected");
    check(rejected.includes("rejected"), `rejected message: ${rejected}`);
    await screenshot(page, "checkout-5-rejected");
    // Approve goes through, then the subscription is rejected: trying again sends only the
    // subscription (the mined approve is not asked for twice).
    const manager = env("MANAGER").toLowerCase();
    wallet.rejectWhen = (m, p) => m === "eth_sendTransaction" && p[0].to.toLowerCase() === manager;
    // With mining paused the approve waits in the mempool: the page says it is pending.
    await rpc(rpcUrl, "evm_setAutomine", [false]);
    await page.locator("#subscribe").click();
    const pending = await state(page, "pending");
    check(pending.includes("Pending"), `pending message: ${pending}`);
    await screenshot(page, "checkout-6-pending");
    await rpc(rpcUrl, "evm_setAutomine", [true]);
    await rpc(rpcUrl, "evm_mine", []);
    await state(page, "rejected");
    check((await page.locator('#steps li[data-step="approve"]').getAttribute("data-done")) === "true", "approve marked done");
    const sendsBefore = wallet.calls.filter((m) => m === "eth_sendTransaction").length;
    await page.locator("#subscribe").click();
    await state(page, "confirmed", 60000);
    check(wallet.calls.filter((m) => m === "eth_sendTransaction").length === sendsBefore + 1, "only subscribe sent on retry");
    const hash = await page.locator("#tx-hash").textContent();
    check(/^0x[0-9a-f]{64}$/.test(hash), `tx hash shown: ${hash}`);
    const href = await page.locator("#explorer-link").getAttribute("href");
    check(href === env("EXPLORER_PREFIX") + hash, `explorer link: ${href}`);
    const manage = await page.locator("#account-link").getAttribute("href");
    check(/^\/account\?merchant=[a-z0-9]+$/.test(manage), `link to the self-service page: ${manage}`);
    check(wallet.calls.filter((m) => m === "eth_sendTransaction").length === 4, "rejected, approve, rejected, subscribe");
    check(wallet.calls.filter((m) => m === "eth_signTypedData_v4").length === 1, "the permit was tried once, unsupported");
    await screenshot(page, "checkout-7-confirmed");
    // On a phone the page fits: the wallet, the contract and the transaction hash wrap.
    for (const width of [390, 1280]) {
      await fitsWidth(page, width, "checkout-7-confirmed");
      await axeClean(page, `checkout at ${width}px`);
    }
    await page.setViewportSize({ width: 900, height: 1000 });
    console.log(`subscribe tx: ${hash}`);

    // 3. The same wallet comes back: already subscribed.
    await page.reload();
    await page.getByRole("button", { name: "Connect wallet" }).click();
    const already = await state(page, "already");
    check(already.includes("already has an active subscription"), `already message: ${already}`);
    await screenshot(page, "checkout-8-already-subscribed");

    // 4. The user switches to an unfunded account in the wallet: the page follows.
    wallet.account = poor;
    await emit(page, "accountsChanged", [poor]);
    await state(page, "insufficient");
    await context.close();
  }

  // 5. One signature, one transaction: a funded wallet with no allowance signs an EIP-2612
  // permit (eth_signTypedData_v4) and sends one subscribeWithPermit. Rejecting the signature
  // sends nothing.
  {
    const { page, wallet, context } = await walletPage(browser, { rpcUrl, account: env("PERMIT_CUSTOMER"), chainIdHex });
    // The browser's clock, to let a signed permit grow stale (time still flows).
    await page.clock.install();
    await page.goto(env("PERMIT_CHECKOUT_URL"));
    await page.getByRole("button", { name: "Connect wallet" }).click();
    const readyMsg = await state(page, "ready");
    check(readyMsg.includes("1 signature") && readyMsg.includes("1 transaction"), `ready message: ${readyMsg}`);
    check((await page.locator("#subscribe").textContent()) === "Sign and subscribe", "button names the signature");
    check((await page.locator('#steps li[data-step="permit"]').count()) === 1, "permit step listed");
    await screenshot(page, "checkout-9-permit-ready");
    // A wallet error that is not "unsupported" is shown, not turned into approve + subscribe.
    wallet.typedDataError = { code: -32603, message: "Internal JSON-RPC error." };
    await page.locator("#subscribe").click();
    const failed = await state(page, "error");
    check(failed.includes("Internal JSON-RPC error"), `error message: ${failed}`);
    check((await page.locator('#steps li[data-step="approve"]').count()) === 0, "no fallback on a wallet error");
    await page.getByRole("button", { name: "Check again" }).click();
    await state(page, "ready");
    wallet.rejectNext = true;
    await page.locator("#subscribe").click();
    const rejected = await state(page, "rejected");
    check(rejected.includes("allowance signature"), `rejected message: ${rejected}`);
    const sends = () => wallet.calls.filter((m) => m === "eth_sendTransaction").length;
    const signs = () => wallet.calls.filter((m) => m === "eth_signTypedData_v4").length;
    check(sends() === 0 && signs() === 2, "a failed and a rejected signature send nothing");
    // Signed, then the transaction rejected; an hour later the signed permit is stale: the
    // page fetches a fresh one instead of sending or re-signing the old one.
    wallet.rejectWhen = (m) => m === "eth_sendTransaction";
    await page.locator("#subscribe").click();
    await state(page, "rejected");
    check(sends() === 1 && signs() === 3, `signed, transaction rejected (${sends()}, ${signs()})`);
    await page.clock.fastForward(3600 * 1000);
    await page.locator("#subscribe").click();
    await state(page, "ready");
    check(sends() === 1 && signs() === 3, `a stale permit is neither sent nor signed again (${sends()}, ${signs()})`);
    await page.locator("#subscribe").click();
    await state(page, "confirmed", 60000);
    check(sends() === 2 && signs() === 4, `one transaction after a fresh signature (${sends()}, ${signs()})`);
    check((await page.locator('#steps li[data-step="permit"]').getAttribute("data-done")) === "true", "permit marked done");
    await screenshot(page, "checkout-10-permit-confirmed");
    console.log(`subscribeWithPermit tx: ${await page.locator("#tx-hash").textContent()}`);
    await context.close();
  }
});
