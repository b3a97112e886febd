// The MCP TypeScript SDK's client on templates and completion of `astrid mcp serve`,
// started from a claude_desktop_config.json entry as probe.mjs does.
//
//   node templates.mjs <claude_desktop_config.json> [server name, default astrid]
//
// Prints one JSON object on stdout: the templates listed, the reads of a few
// template URIs (text, or {"error": code} when refused) and a few completions.
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";

const [configFile, name = "astrid"] = process.argv.slice(2);
const entry = JSON.parse(readFileSync(configFile, "utf8")).mcpServers[name];
const client = new Client({ name: "astrid-ts-templates", version: "1.0.0" });
await client.connect(new StdioClientTransport({
  command: entry.command,
  args: entry.args ?? [],
  env: { ...getDefaultEnvironment(), ...(entry.env ?? {}) },
  stderr: "inherit",
}));

const READS = [
  "test://template/7/data",
  "astrid://files/notes/today.md",
  "astrid://files/a%20b/c.txt",
  "astrid://files/notes/../README.md",
  "astrid://files/%2e%2e/README.md",
];
const COMPLETIONS = [
  ["astrid://files/{+path}", "path", "notes/"],
  ["test://template/{id}/data", "id", "12"],
];

const { resourceTemplates } = await client.listResourceTemplates();
const reads = {};
for (const uri of READS) {
  try {
    const { contents } = await client.readResource({ uri });
    reads[uri] = contents.map((chunk) => chunk.text);
  } catch (error) {
    reads[uri] = { error: error.code };
  }
}
const completions = {};
for (const [uriTemplate, argument, value] of COMPLETIONS) {
  const { completion } = await client.complete({
    ref: { type: "ref/resource", uri: uriTemplate },
    argument: { name: argument, value },
  });
  completions[`${uriTemplate} ${argument}=${value}`] = completion.values;
}
process.stdout.write(JSON.stringify({
  capabilities: Object.keys(client.getServerCapabilities() ?? {}).sort(),
  templates: resourceTemplates.map((t) => ({ uriTemplate: t.uriTemplate, name: t.name, mimeType: t.mimeType })),
  reads,
  completions,
}) + "\n");
await client.close();
