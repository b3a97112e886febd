// Builds a JS/TS capsule: esbuild bundles the entry with the SDK into one ESM file (the astrid:* host
// interfaces left as imports), then componentize-js makes the component against the capsule world.
// Usage: node build.mjs ENTRY SDK_ENTRY WIT_DIR WORLD OUT.wasm
// Progress lines on stdout ("phase: bundle"); a failure is one line on stderr, "file:line: message", exit 1.
import { writeFile } from 'node:fs/promises';
import { builtinModules } from 'node:module';
import path from 'node:path';
import * as esbuild from 'esbuild';
import { componentize } from '@bytecodealliance/componentize-js';

const [entry, sdkEntry, witDir, world, out] = process.argv.slice(2);
const folder = path.dirname(path.resolve(entry));
// Clocks, random and stdio import the WASI the host serves deny-by-default (0.2.12); http and fetch
// stay off: a capsule reaches the network through the host's astrid:http, after a grant.
const DISABLED = ['http', 'fetch-event'];

function fail(message) {
  process.stderr.write(message.split('\n')[0] + '\n');
  process.exit(1);
}

// The source map as "bundle line -> author file:line", for the author's files only (not the SDK):
// the SDK reads it to name the author's line in a read error and in the manifest check's sites.
function authorLines(map) {
  const chars = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/';
  const lines = {};
  let source = 0, original = 0;
  map.mappings.split(';').forEach((text, generated) => {
    let column = 0, found = null;
    for (const segment of text.split(',')) {
      if (!segment) continue;
      const values = [];
      let value = 0, shift = 0;
      for (const c of segment) {
        const digit = chars.indexOf(c);
        value += (digit & 31) << shift;
        if (digit & 32) { shift += 5; continue; }
        values.push(value & 1 ? -(value >>> 1) : value >>> 1);
        value = 0; shift = 0;
      }
      column += values[0];
      if (values.length >= 4) {
        source += values[1];
        original += values[2];
        if (found === null) found = [source, original];
      }
    }
    if (found === null) return;
    const file = path.relative(folder, path.resolve(path.dirname(out), map.sources[found[0]]));
    if (!file.startsWith('..') && !file.includes('node_modules')) lines[generated + 1] = `${file}:${found[1] + 1}`;
  });
  return lines;
}

// A capsule runs in WebAssembly, not in Node.js: an import of a Node built-in is refused at build time,
// naming who imports it (an npm package, or the author's file) and why.
const BUILTINS = new Set(builtinModules.map((name) => name.replace(/^node:/, '')));
const NO_FILES = 'a capsule has no file system: read files with ctx.fs, after the operator grants fs';
const NO_SOCKETS = 'a capsule has no sockets: reach the network with ctx.http, after the operator grants http';
const NO_PROCESSES = 'a capsule cannot start processes or threads';
const WHY = {
  fs: NO_FILES, 'fs/promises': NO_FILES,
  net: NO_SOCKETS, http: NO_SOCKETS, https: NO_SOCKETS, http2: NO_SOCKETS, dgram: NO_SOCKETS, dns: NO_SOCKETS,
  tls: NO_SOCKETS, child_process: NO_PROCESSES, cluster: NO_PROCESSES, worker_threads: NO_PROCESSES,
};

function packageOf(file) {
  const parts = file.split(/[\\/]/);
  const at = parts.lastIndexOf('node_modules');
  if (at < 0 || at + 1 >= parts.length) return null;
  return parts[at + 1].startsWith('@') ? `${parts[at + 1]}/${parts[at + 2]}` : parts[at + 1];
}

const refuseNodeBuiltins = {
  name: 'astrid-no-node-builtins',
  setup(build) {
    build.onResolve({ filter: /^[a-z_/:]+$/ }, (args) => {
      const name = args.path.replace(/^node:/, '');
      if (!BUILTINS.has(name) && !BUILTINS.has(name.split('/')[0])) return undefined;
      const why = WHY[name] ?? WHY[name.split('/')[0]] ?? 'a capsule runs in WebAssembly, not in Node.js, and has no Node built-ins';
      const owner = packageOf(args.importer);
      const who = owner ? `the npm package ${owner} imports` : 'imports';
      return { errors: [{ text: `${who} the Node built-in "${name}", which a capsule cannot use: ${why}` }] };
    });
  },
};

let bundled;
console.log('phase: bundle');
try {
  bundled = await esbuild.build({
    entryPoints: [entry],
    bundle: true,
    format: 'esm',
    platform: 'neutral',
    target: 'es2022',
    write: false,
    sourcemap: 'external',
    outfile: out + '.js',
    external: ['astrid:*'],
    alias: { '@astrid/sdk': path.resolve(sdkEntry) },
    mainFields: ['module', 'main'], // npm packages (platform 'neutral' reads only `exports` by default)
    plugins: [refuseNodeBuiltins],
    logLevel: 'silent',
  });
} catch (error) {
  const first = error.errors?.[0];
  if (first?.location) {
    const where = path.relative(process.cwd(), path.resolve(first.location.file));
    fail(`${where}:${first.location.line}: ${first.text}`);
  }
  fail(`esbuild: ${error.message}`);
}
const code = bundled.outputFiles.find((f) => f.path.endsWith('.js')).text;
const map = JSON.parse(bundled.outputFiles.find((f) => f.path.endsWith('.map')).text);
// Appended, so no line of the bundle moves.
const source = `${code}\nglobalThis.__astridLines = ${JSON.stringify(authorLines(map))};\n`;

console.log('phase: componentize');
let result;
try {
  result = await componentize(source, {
    sourceName: path.basename(entry).replace(/\.ts$/, '.js'),
    witPath: witDir,
    worldName: world,
    disableFeatures: DISABLED,
  });
} catch (error) {
  if (process.env.ASTRID_JS_DEBUG) console.error(error);
  fail(`componentize-js: ${String(error.message ?? error).trim().split("\n").filter(Boolean).pop()}`);
}
await writeFile(out, result.component);
console.log(`imports: ${[...new Set(result.imports.map((i) => i[0]))].join(" ")}`);
