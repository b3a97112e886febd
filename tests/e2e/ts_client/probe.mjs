// The MCP TypeScript SDK's client on `astrid mcp serve`, started the way
// Claude Desktop starts a server from its config: the entry's command, args
// and env over the SDK's default environment, on stdio.
//
//   node probe.mjs <claude_desktop_config.json> [server name, default astrid]
//
// Prints one JSON object per line on stdout:
//   {"event": "listed", ...}   after initialize, a list and a read of every resource
//   {"event": "changed", ...}  after the next resources/list_changed, the same again
//   {"event": "timeout"}       if no list_changed came within WAIT_MS
import { createHash } from "node:crypto";
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ResourceListChangedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const WAIT_MS = Number(process.env.PROBE_WAIT_MS ?? 30000);
const [configFile, name = "astrid"] = process.argv.slice(2);
const entry = JSON.parse(readFileSync(configFile, "utf8")).mcpServers[name];

const transport = new StdioClientTransport({
  command: entry.command,
  args: entry.args ?? [],
  env: { ...getDefaultEnvironment(), ...(entry.env ?? {}) },
  stderr: "inherit",
});
const client = new Client({ name: "astrid-ts-probe", version: "1.0.0" });

let changed;
const listChanged = new Promise((resolve) => { changed = resolve; });
client.setNotificationHandler(ResourceListChangedNotificationSchema, () => changed());

const emit = (event) => process.stdout.write(JSON.stringify(event) + "\n");
const sha256 = (bytes) => createHash("sha256").update(bytes).digest("hex");

async function snapshot() {
  const { resources } = await client.listResources();
  const reads = {};
  for (const resource of resources) {
    const { contents } = await client.readResource({ uri: resource.uri });
    reads[resource.uri] = contents.map((chunk) => ({
      uri: chunk.uri,
      mimeType: chunk.mimeType ?? null,
      text: chunk.text ?? null,
      sha256: sha256(chunk.text !== undefined ? Buffer.from(chunk.text, "utf8") : Buffer.from(chunk.blob, "base64")),
    }));
  }
  return { resources: resources.map(({ uri, name, mimeType }) => ({ uri, name, mimeType: mimeType ?? null })), reads };
}

async function missing(uri) {
  try {
    await client.readResource({ uri });
    return { code: null };
  } catch (error) {
    return { code: error.code ?? null, message: String(error.message) };
  }
}

await client.connect(transport);
emit({
  event: "listed",
  server: client.getServerVersion(),
  capabilities: client.getServerCapabilities(),
  instructions: client.getInstructions() ?? null,
  missing: await missing("astrid://no-such-capsule/x"),
  ...(await snapshot()),
});
// unref: a pending timer must not keep node alive after the client closes
const timedOut = new Promise((resolve) => setTimeout(() => resolve("timeout"), WAIT_MS).unref());
if ((await Promise.race([listChanged, timedOut])) === "timeout") {
  emit({ event: "timeout" });
} else {
  emit({ event: "changed", ...(await snapshot()) });
}
await client.close();
