// Parses docs/asyncapi.yaml with the official AsyncAPI parser
// and fails on any error-level diagnostic; warnings are printed.
// usage: node validate-asyncapi.mjs FILE
import { Parser, fromFile } from '@asyncapi/parser';

const file = process.argv[2];
const parser = new Parser();
const { document, diagnostics } = await fromFile(parser, file).parse();
const names = ['error', 'warning', 'info', 'hint'];
let errors = 0;
for (const d of diagnostics) {
  const where = d.path && d.path.length ? d.path.join('.') : '(document)';
  console.log(`${names[d.severity] ?? d.severity}: ${d.code}: ${where}: ${d.message}`);
  if (d.severity === 0) errors++;
}
if (!document || errors > 0) {
  console.log(`asyncapi: ${file}: ${errors} error(s)`);
  process.exit(1);
}
console.log(`asyncapi: ${file}: valid AsyncAPI ${document.version()}, ` +
  `${document.channels().length} channels, ${document.messages().length} messages, ` +
  `${diagnostics.length} diagnostic(s) below error level`);
