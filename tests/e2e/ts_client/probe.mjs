// The MCP TypeScript SDK's client on `astrid mcp serve`, started the way
// Claude Desktop starts a server from its config: the entry's command, args
// and env over the SDK's default environment, on stdio.
//
//   node probe.mjs <claude_desktop_config.json> [server name, default astrid]
//
// Prints one JSON object per line on stdout:
//   {"event": "listed", ...}   after initialize, a list and a read of every resource
//                              (with --resource-tools, `tools`: the same through the tools; else null)
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

const contentView = (item) => {
  if (item.type === "text") return { type: "text", text: item.text, sha256: sha256(Buffer.from(item.text, "utf8")) };
  if (item.type === "image") return { type: "image", mimeType: item.mimeType, sha256: sha256(Buffer.from(item.data, "base64")) };
  const { uri, mimeType = null, text, blob } = item.resource;
  const bytes = text !== undefined ? Buffer.from(text, "utf8") : Buffer.from(blob, "base64");
  return { type: item.type, uri, mimeType, sha256: sha256(bytes) };
};

// --resource-tools: the tools, list_resources, read_resource of every uri it lists and of one it does not.
async function toolsView() {
  if (!client.getServerCapabilities()?.tools) return null;
  const { tools } = await client.listTools();
  const call = async (name, args) => {
    const result = await client.callTool({ name, arguments: args });
    return { isError: result.isError ?? false, content: result.content.map(contentView), structured: result.structuredContent ?? null };
  };
  const listed = await call("list_resources", {});
  const reads = {};
  for (const { uri } of listed.structured?.resources ?? []) reads[uri] = await call("read_resource", { uri });
  return {
    tools: tools.map(({ name, title, annotations, inputSchema }) => ({ name, title, annotations, inputSchema })),
    listed,
    reads,
    missing: await call("read_resource", { uri: "astrid://no-such-capsule/x" }),
  };
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
  tools: await toolsView(),
});
// unref: a pending timer must not keep node alive after the client closes
const timedOut = new Promise((resolve) => setTimeout(() => resolve("timeout"), WAIT_MS).unref());
if ((await Promise.race([listChanged, timedOut])) === "timeout") {
  emit({ event: "timeout" });
} else {
  emit({ event: "changed", ...(await snapshot()) });
}
await client.close();
