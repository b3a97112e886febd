// The MCP TypeScript SDK's client subscribing to a resource of `astrid mcp serve`
// (resources/subscribe, 2025-11-25), started from a claude_desktop_config.json entry
// as probe.mjs does.
//
//   node subscribe.mjs <claude_desktop_config.json> <uri> [server name, default astrid]
//
// Prints one JSON object per line on stdout: {"event": "ready", "subscribe", "text"}
// once subscribed (and the URI read), then {"event": "updated", "uri"} for every
// notifications/resources/updated. Reads commands on stdin, one a line: `read`
// ({"event": "read", "text"}), `unsubscribe` ({"event": "unsubscribed"}), `close`.
import { readFileSync } from "node:fs";
import { createInterface } from "node:readline";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport, getDefaultEnvironment } from "@modelcontextprotocol/sdk/client/stdio.js";
import { ResourceUpdatedNotificationSchema } from "@modelcontextprotocol/sdk/types.js";

const [configFile, uri, name = "astrid"] = process.argv.slice(2);
const entry = JSON.parse(readFileSync(configFile, "utf8")).mcpServers[name];
const client = new Client({ name: "astrid-ts-subscribe", version: "1.0.0" });
const say = (event) => process.stdout.write(JSON.stringify(event) + "\n");
client.setNotificationHandler(ResourceUpdatedNotificationSchema, (notification) => {
  say({ event: "updated", uri: notification.params.uri });
});
await client.connect(new StdioClientTransport({
  command: entry.command,
  args: entry.args ?? [],
  env: { ...getDefaultEnvironment(), ...(entry.env ?? {}) },
  stderr: "inherit",
}));

const text = async () => (await client.readResource({ uri })).contents.map((chunk) => chunk.text).join("");
await client.subscribeResource({ uri });
say({ event: "ready", subscribe: client.getServerCapabilities()?.resources?.subscribe ?? null, text: await text() });

for await (const line of createInterface({ input: process.stdin })) {
  const command = line.trim();
  if (command === "read") {
    say({ event: "read", text: await text() });
  } else if (command === "unsubscribe") {
    await client.unsubscribeResource({ uri });
    say({ event: "unsubscribed" });
  } else if (command === "close") {
    break;
  }
}
await client.close();
process.exit(0); // stdin may still be open: nothing else is left to do
