// The server entry Claude Desktop makes from an installed bundle: the mcpb library's own
// getMcpConfigForManifest (platform overrides, ${__dirname}, ${user_config.*} and the system folders).
// Usage: node mcp_config.mjs EXTENSION_DIR USER_CONFIG_JSON  ->  {"command", "args", "env"} on stdout
import { readFileSync } from "node:fs";
import { homedir } from "node:os";
import { join, sep } from "node:path";
import { getMcpConfigForManifest } from "@anthropic-ai/mcpb";

const [extensionPath, userConfigJson] = process.argv.slice(2);
const manifest = JSON.parse(readFileSync(join(extensionPath, "manifest.json"), "utf8"));
const home = homedir();
const config = await getMcpConfigForManifest({
  manifest,
  extensionPath,
  systemDirs: { HOME: home, DESKTOP: join(home, "Desktop"), DOCUMENTS: join(home, "Documents"), DOWNLOADS: join(home, "Downloads") },
  userConfig: JSON.parse(userConfigJson),
  pathSeparator: sep,
});
if (config === undefined) {
  console.error("no server entry: a required setting is missing");
  process.exit(1);
}
process.stdout.write(JSON.stringify(config));
