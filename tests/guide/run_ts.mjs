// Runs docs/integration.md's TypeScript snippet as a merchant would: type-checks it (strict)
// and runs it on every delivery of a file. Usage: node tests/guide/run_ts.mjs SNIPPET.ts
// DELIVERIES.json, with CHAINSUB_WEBHOOK_SECRET set; DELIVERIES.json is
// [{"body": "<raw body>", "headers": {...}}]. Prints one JSON line per delivery:
// {"ok": true, "id", "type"} or {"ok": false, "error"}. The snippet must sit inside the
// repository (its `standardwebhooks` import resolves from node_modules).
import { readFileSync, writeFileSync } from "node:fs";
import { pathToFileURL } from "node:url";
import ts from "typescript";

const [snippet, deliveries] = process.argv.slice(2);
const options = {
  strict: true,
  noEmit: true,
  target: ts.ScriptTarget.ES2022,
  module: ts.ModuleKind.NodeNext,
  moduleResolution: ts.ModuleResolutionKind.NodeNext,
  types: ["node"],
};
const program = ts.createProgram([snippet], options);
const problems = ts.getPreEmitDiagnostics(program);
if (problems.length > 0) {
  console.error(ts.formatDiagnostics(problems, { getCanonicalFileName: (f) => f, getCurrentDirectory: () => process.cwd(), getNewLine: () => "\n" }));
  process.exit(2);
}
const js = ts.transpileModule(readFileSync(snippet, "utf8"), {
  compilerOptions: { target: ts.ScriptTarget.ES2022, module: ts.ModuleKind.ES2022 },
}).outputText;
const out = snippet.replace(/\.ts$/, ".mjs");
writeFileSync(out, js);
const { verifyDelivery } = await import(pathToFileURL(out).href);
for (const d of JSON.parse(readFileSync(deliveries, "utf8"))) {
  try {
    const event = verifyDelivery(d.body, d.headers);
    console.log(JSON.stringify({ ok: true, id: event.id, type: event.type }));
  } catch (e) {
    console.log(JSON.stringify({ ok: false, error: String(e && e.message ? e.message : e) }));
  }
}
