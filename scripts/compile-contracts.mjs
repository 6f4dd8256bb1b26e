#!/usr/bin/env node
// Compiles contracts/*.sol with solcjs (the `solc` npm package pinned in package-lock.json)
// and writes Foundry-style artifacts ({abi, bytecode.object, deployedBytecode.object}) to
// abi/artifacts/<Contract>.json. `--check` compiles and compares instead of writing, and
// exits 1 when the committed artifacts are stale.
import { readFileSync, writeFileSync, readdirSync } from "node:fs";
import { join, dirname } from "node:path";
import { fileURLToPath } from "node:url";
import { createRequire } from "node:module";

const require = createRequire(import.meta.url);
const solc = require("solc");
const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const check = process.argv.includes("--check");

const sources = {};
for (const file of readdirSync(join(root, "contracts")).filter((f) => f.endsWith(".sol")).sort()) {
  sources[`contracts/${file}`] = { content: readFileSync(join(root, "contracts", file), "utf8") };
}

const input = {
  language: "Solidity",
  sources,
  settings: {
    optimizer: { enabled: true, runs: 200 },
    evmVersion: "cancun",
    metadata: { bytecodeHash: "none", appendCBOR: false },
    outputSelection: { "*": { "*": ["abi", "evm.bytecode.object", "evm.deployedBytecode.object"] } },
  },
};

const output = JSON.parse(solc.compile(JSON.stringify(input)));
const errors = (output.errors || []).filter((e) => e.severity === "error");
for (const e of output.errors || []) console.error(e.formattedMessage);
if (errors.length) process.exit(1);

let stale = 0;
for (const [path, contracts] of Object.entries(output.contracts)) {
  for (const [name, c] of Object.entries(contracts)) {
    if (path.endsWith("IERC20") || c.evm.bytecode.object === "") continue; // interfaces
    const artifact = {
      contractName: name,
      sourceName: path,
      compiler: solc.version(),
      abi: c.abi,
      bytecode: { object: "0x" + c.evm.bytecode.object },
      deployedBytecode: { object: "0x" + c.evm.deployedBytecode.object },
    };
    const text = JSON.stringify(artifact, null, 2) + "\n";
    const out = join(root, "abi", "artifacts", `${name}.json`);
    if (check) {
      let current = "";
      try { current = readFileSync(out, "utf8"); } catch {}
      if (current !== text) { console.error(`stale: abi/artifacts/${name}.json differs from a fresh compile`); stale++; }
    } else {
      writeFileSync(out, text);
      console.log(`wrote abi/artifacts/${name}.json`);
    }
  }
}
if (stale) { console.error("run: node scripts/compile-contracts.mjs"); process.exit(1); }
if (check) console.log("abi/artifacts match a fresh compile");
