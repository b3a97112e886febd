"""`make bench`: astrid mcp serve against a plain MCP server, side by side, in one run.

Prints a table with astrid/baseline ratios, writes bench-results/results.json
and bench-results/latency.png.
"""

from __future__ import annotations

import compileall
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio

from bench.driver import Timings, cold_list, drive, python_command, summary

HERE = Path(__file__).resolve().parent
OUT = HERE.parent / "bench-results"
COUNTS = [int(n) for n in os.environ.get("BENCH_COUNTS", "1,5,20").split(",")]
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "100"))
COLD_RUNS = int(os.environ.get("BENCH_COLD_RUNS", "5"))
HTTP_SECONDS = float(os.environ.get("BENCH_HTTP_SECONDS", "5"))
# the edit loop's rounds: dev mode, full build (each build runs componentize-py: ~20-30 s)
# BENCH_COMPARE_ONLY=1: only the rows against the two baselines (stdio and HTTP), not the in-process tools
COMPARE_ONLY = os.environ.get("BENCH_COMPARE_ONLY") == "1"
# the stdio rows' rounds run in this many blocks, the systems taking turns
PASSES = int(os.environ.get("BENCH_PASSES", "4"))
# astrid, and the two servers it is compared with: the plain `mcp` low-level server, and FastMCP
SYSTEMS = ("astrid", "baseline", "fastmcp")
COMPARED = ("list_warm", "list_first", "read_text", "read_blob", "read_fresh", "startup_warm_cache")
EDIT_ROUNDS = tuple(int(n) for n in os.environ.get("BENCH_EDIT_ROUNDS", "5,2").split(","))


def astrid_exe() -> str:
    return str(Path(sys.executable).parent / "astrid")


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


def tool(*args: str) -> str:
    """What `python ARGS` (one of the bench's tools) printed; its own error output when it fails."""
    done = subprocess.run(python_command(*args), capture_output=True, text=True, check=False)
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-20:])
        raise SystemExit(f"bench: `{' '.join(args)}` failed (exit {done.returncode}):\n{tail}")
    return done.stdout


def prepare_capsules(root: Path, count: int) -> Path:
    """K copies of the one bench build, each with its own name and index."""
    source = HERE / "capsule"
    folder = root / f"k{count}"
    folder.mkdir()
    for index in range(count):
        target = folder / f"bench-{index:02d}"
        shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
        manifest = (target / "Capsule.toml").read_text()
        manifest = manifest.replace('name = "bench"', f'name = "bench-{index:02d}"').replace(
            'index = "0"', f'index = "{index:02d}"'
        )
        manifest += f'\n[resources]\nfamilies = ["astrid://bench/{index:02d}-", "astrid://bench-fresh/{index:02d}-"]\n'
        (target / "Capsule.toml").write_text(manifest)
    return folder


def prepare_burn(root: Path) -> Path:
    """A folder holding the burn capsule (~2 ms of guest CPU per read), built."""
    folder = root / "burn"
    folder.mkdir()
    target = folder / "burn"
    shutil.copytree(HERE / "burn_capsule", target, ignore=shutil.ignore_patterns("__pycache__", "__init__.py"))
    subprocess.run([astrid_exe(), "capsule", "build", str(target)], check=True)
    return folder


def compile_sources() -> None:
    """Write the project's bytecode, as any first run does (the baseline's `mcp` came compiled
    from pip): with PYTHONDONTWRITEBYTECODE set, every start would compile astrid's changed sources."""
    for folder in ("host", "cli", "bench"):
        compileall.compile_dir(HERE.parent / folder, quiet=2)


def run() -> dict:
    log("building the bench capsule ...")
    subprocess.run([astrid_exe(), "capsule", "build", str(HERE / "capsule")], check=True)
    compile_sources()
    results: dict = {
        "rounds": ROUNDS,
        "counts": COUNTS,
        "load": {},
        "ratios": {},
        "ratios_fastmcp": {},
        "fanout": {},
        **{system: {} for system in SYSTEMS},
    }
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        for count in COUNTS:
            folder = prepare_capsules(root, count)
            commands = {
                "baseline": python_command("-m", "bench.baseline_server", str(count)),
                "fastmcp": python_command("-m", "bench.fastmcp_server", str(count)),
                "astrid": [astrid_exe(), "mcp", "serve", "--capsules", str(folder), "--principal", "bench"],
            }
            env = {"PYTHONPATH": str(HERE.parent)}
            log(f"K={count}: driving the three servers, interleaved ({ROUNDS} rounds each) ...")
            results["load"][count] = os.getloadavg()[0]
            for system, entry in interleaved(commands, env).items():
                results[system][count] = entry
            fresh = {"ASTRID_CACHE_DIR": str(root / f"cold-cache-{count}")}
            results["astrid"][count]["startup_cold_cache"] = summary(
                [anyio.run(drive, commands["astrid"], {**env, **fresh}, 0, True).startup_s]
            )
            if count == min(COUNTS):
                log(f"K={count}: HTTP concurrency, the three servers ...")
                http = tool("-m", "bench.http_load", str(folder), str(count), str(HTTP_SECONDS))
                results["http"] = json.loads(http.strip().splitlines()[-1])
                results["http"]["capsules"] = count
                if COMPARE_ONLY:
                    continue
                log(f"K={count}: HTTP, --workers 2 against one process (the bench and the burn capsule) ...")
                burn = prepare_burn(root)
                workers = tool("-m", "bench.workers_load", str(folder), str(burn), str(HTTP_SECONDS))
                results["workers"] = json.loads(workers.strip().splitlines()[-1])
                log(f"K={count}: over NATS on loopback, against the in-memory bus ...")
                nats = tool("-m", "bench.nats", str(folder), str(ROUNDS))
                results["nats"] = json.loads(nats.strip().splitlines()[-1])
                results["nats"]["capsules"] = count
                log(f"K={count}: tracing and metrics off and on, in-process ...")
                telemetry = tool("-m", "bench.telemetry", str(folder), str(ROUNDS))
                results["telemetry"] = json.loads(telemetry.strip().splitlines()[-1])
                results["telemetry"]["capsules"] = count
            fanout = tool("-m", "bench.fanout", str(folder), "30")
            results["fanout"][count] = json.loads(fanout.strip().splitlines()[-1])
            if count == min(COUNTS):
                phases = tool("-m", "bench.guest_phases", str(ROUNDS * 3), "--capsule", str(folder), "--json")
                results["phases"] = json.loads(phases.strip().splitlines()[-1])
            if count == max(COUNTS):
                static = tool("-m", "bench.static_fanout", "200")
                results["static_fanout"] = [json.loads(line) for line in static.strip().splitlines()]
                rss = tool("-m", "bench.rss", str(folder), "3")
                results["rss"] = json.loads(rss)
                principals = tool("-m", "bench.principals", str(folder), "100", "256")
                results["principals"] = json.loads(principals.strip().splitlines()[-1])
    if COMPARE_ONLY:
        return with_ratios(results)
    log(f"the edit loop: save app.py -> served, dev mode ({EDIT_ROUNDS[0]}x) and full build ({EDIT_ROUNDS[1]}x) ...")
    edit = tool("-m", "bench.edit_loop", *map(str, EDIT_ROUNDS))
    results["edit_loop"] = json.loads(edit.strip().splitlines()[-1])
    log("the scaffold capsule, TypeScript beside Python: build, compile, start, reads, memory ...")
    side_by_side = tool("-m", "bench.ts_capsule", str(ROUNDS))
    results["ts_capsule"] = json.loads(side_by_side.strip().splitlines()[-1])
    return with_ratios(results)


def with_ratios(results: dict) -> dict:
    for count in results["counts"]:
        a = results["astrid"][count]
        for key, other in (("ratios", "baseline"), ("ratios_fastmcp", "fastmcp")):
            b = results[other][count]
            results[key][count] = {metric: a[metric]["median_ms"] / b[metric]["median_ms"] for metric in COMPARED}
    return results


def interleaved(commands: dict[str, list[str]], env: dict[str, str]) -> dict[str, dict]:
    """Every system's stdio timings, taking turns: the rounds in PASSES blocks and each start-up
    sample one after the other, so a busy machine's drift (7 others share these 2 cores) hits
    each system alike."""
    runs: dict[str, Timings] = {system: Timings() for system in commands}
    colds: dict[str, list[float]] = {system: [] for system in commands}
    starts: dict[str, list[float]] = {system: [] for system in commands}
    for block in range(PASSES):
        rounds = ROUNDS // PASSES + (1 if block < ROUNDS % PASSES else 0)
        for system, command in commands.items():
            runs[system].add(anyio.run(drive, command, env, rounds))
    for _ in range(COLD_RUNS):
        for system, command in commands.items():
            colds[system].append(anyio.run(cold_list, command, env))
            starts[system].append(anyio.run(drive, command, env, 0, True).startup_s)
    return {
        system: {
            "resources": timings.resources,
            "list_warm": summary(timings.list_warm),
            "list_first": summary(colds[system]),
            "read_text": summary(timings.read_text),
            "read_blob": summary(timings.read_blob),
            "read_fresh": summary(timings.read_fresh),
            "startup_warm_cache": summary(starts[system]),
        }
        for system, timings in runs.items()
    }


def cell(measured: dict) -> str:
    return f"{measured['median_ms']:.2f} ({measured['p99_ms']:.2f})"


def comparison_table(results: dict) -> str:
    """astrid beside the plain low-level server and FastMCP: the same resources, client and run."""
    rows = [
        "| metric | K | astrid median (p99) ms | low-level median (p99) ms | FastMCP median (p99) ms "
        "| vs low-level | vs FastMCP |",
        "|---|---|---|---|---|---|---|",
    ]
    for count in results["counts"]:
        a, b, f = results["astrid"][count], results["baseline"][count], results["fastmcp"][count]
        low, fast = results["ratios"][count], results["ratios_fastmcp"][count]
        for metric in COMPARED:
            rows.append(
                f"| {metric} | {count} | {cell(a[metric])} | {cell(b[metric])} | {cell(f[metric])} "
                f"| {low[metric]:.2f}x | {fast[metric]:.2f}x |"
            )
        rows.append(f"| startup_cold_cache | {count} | {a['startup_cold_cache']['median_ms']:.0f} | - | - | - | - |")
    if "http" in results:
        http = results["http"]
        for clients, ratio in http["throughput_ratio"].items():
            measured = [http[system][clients] for system in ("astrid", "baseline", "fastmcp")]
            rows.append(
                f"| HTTP reads, {clients} concurrent clients: req/s (p50 / p99 ms) | {http['capsules']} | "
                + " | ".join(f"{m['throughput_rps']:.0f} ({m['p50_ms']:.1f} / {m['p99_ms']:.1f})" for m in measured)
                + f" | {ratio:.2f}x | {http['throughput_ratio_fastmcp'][clients]:.2f}x |"
            )
    return "\n".join(rows)


def table(results: dict) -> str:
    """The rows astrid has no FastMCP counterpart for (the baseline column: the low-level server or as named)."""
    rows = ["| metric | K | astrid median (p99) | baseline median (p99) | ratio |", "|---|---|---|---|---|"]
    if "workers" in results:  # `--workers 2` vs one process, each round interleaved
        for name, label in (("bench", "1 KiB text"), ("burn", "~2 ms guest CPU")):
            w = results["workers"][name]
            one, two = w["rps_median"]["1"], w["rps_median"]["2"]
            rows.append(
                f"| HTTP reads, {w['clients']} clients, `--workers 2` vs 1 ({label}, "
                f"read {w['in_process_read']['cpu_ms']:.2f} ms CPU in process): req/s, median of {len(w['ratios'])} "
                "rounds | 1 | "
                f"{two:.0f} | {one:.0f} | "
                f"{w['ratio_median']:.2f}x |"
            )
    if "nats" in results:
        nats = results["nats"]
        for metric in ("list_warm", "read_text", "read_blob"):
            a, b = nats["nats"][metric], nats["in_memory"][metric]
            rows.append(
                f"| {metric} over NATS (astrid vs astrid in-memory) | {nats['capsules']} | "
                f"{a['median_ms']:.2f} ({a['p99_ms']:.2f}) | {b['median_ms']:.2f} ({b['p99_ms']:.2f}) | "
                f"{nats['ratios'][metric]:.2f}x |"
            )
    if "telemetry" in results:
        telemetry = results["telemetry"]
        off = telemetry["read_text"]["off"]
        for name, what in (
            ("off_again", "off, a second sample (the noise floor)"),
            ("tracing", "tracing on (OTLP to loopback)"),
            ("metrics", "metrics on"),
        ):
            measured = telemetry["read_text"][name]
            rows.append(
                f"| in-process read, {what}: median us (added) | {telemetry['capsules']} | "
                f"{measured['median_us']:.0f} ({measured['added_us']:+.0f}) | off: {off['median_us']:.0f} "
                f"| {telemetry['ratios'][name]:.2f}x |"
            )
    if "edit_loop" in results:
        edit = results["edit_loop"]
        dev, build = edit["dev"], edit["build"]
        rows.append(
            f"| edit loop: save app.py -> new content served, s median (min-max): `capsule dev` vs "
            f"`capsule build` + hot reload | 1 | {dev['median_s']:.2f} ({dev['min_s']:.2f}-{dev['max_s']:.2f}) | "
            f"build: {build['median_s']:.1f} ({build['min_s']:.1f}-{build['max_s']:.1f}) | "
            f"{1 / edit['ratio']:.3f}x |"
        )
    if "ts_capsule" in results:
        rows.extend(ts_capsule_rows(results["ts_capsule"]))
    for count, fan in results["fanout"].items():
        rows.append(
            f"| describe fan-out, in-process: first / refreshed | {count} | "
            f"{fan['first_ms']:.1f} / {fan['refresh_median_ms']:.1f} | - | - |"
        )
    if len(results["fanout"]) > 1:
        largest, smallest = max(results["fanout"]), min(results["fanout"])
        small, large = results["fanout"][smallest], results["fanout"][largest]
        rows.append(
            f"| full fan-out K={largest} / K={smallest}: first / refreshed | | "
            f"{large['first_ms'] / small['first_ms']:.2f}x / "
            f"{large['refresh_median_ms'] / small['refresh_median_ms']:.2f}x | | |"
        )
    return "\n".join(rows)


# (metric, the result's key, its format): the TypeScript scaffold in the astrid column, the Python one as baseline
TS_CAPSULE_ROWS = (
    ("build from empty caches, s", "build_s", ".1f"),
    ("component size, MB", "component_mb", ".1f"),
    ("wasmtime compile, empty cache, s", "compile_cold_s", ".1f"),
    ("warm start to the first read, in-process, ms", "warm_start_first_read_ms", ".1f"),
    ("read, in-process, median ms", "read_median_ms", ".2f"),
    ("private memory (USS) per (capsule, principal) sandbox, MiB", "uss_per_sandbox_mib", ".2f"),
)


def ts_capsule_rows(side_by_side: dict) -> list[str]:
    """bench.ts_capsule's numbers: the ratio is TypeScript / Python."""
    ts, py = side_by_side["ts"], side_by_side["python"]
    return [
        f"| scaffold capsule, TypeScript vs Python: {metric} | 1 | {ts[key]:{spec}} | {py[key]:{spec}} "
        f"| {ts[key] / py[key]:.2f}x |"
        for metric, key, spec in TS_CAPSULE_ROWS
    ]


def static_fanout_ratio(results: dict) -> float:
    """A fresh principal's list over 20 static capsules against one (static describes on)."""
    on = {row["capsules"]: row["fresh_list_median_ms"] for row in results["static_fanout"] if row["static"]}
    return float(on[max(on)] / on[min(on)])


def at_k1(ratios: str, metric: str) -> Callable[[dict], float]:
    """A stdio row's ratio at the smallest K: `ratios` vs the low-level server, `ratios_fastmcp` vs FastMCP."""
    return lambda r: r[ratios][min(r["counts"])][metric]


# (target, how it is read off the results, the limit, whether the ratio must stay below it); issue 39's
# targets against both baselines, then issue 21's that they do not replace
TARGETS: list[tuple[str, Callable[[dict], float], float, bool]] = [
    ("uncached read (text) <= 1.0x FastMCP", at_k1("ratios_fastmcp", "read_text"), 1.0, True),
    ("uncached read (text) <= 1.5x low-level", at_k1("ratios", "read_text"), 1.5, True),
    ("uncached read (blob) <= 1.0x FastMCP", at_k1("ratios_fastmcp", "read_blob"), 1.0, True),
    ("uncached read (blob) <= 1.5x low-level", at_k1("ratios", "read_blob"), 1.5, True),
    ("warm list <= 1.0x FastMCP", at_k1("ratios_fastmcp", "list_warm"), 1.0, True),
    ("warm list <= 1.0x low-level", at_k1("ratios", "list_warm"), 1.0, True),
    ("declared-fresh read <= 1.0x FastMCP", at_k1("ratios_fastmcp", "read_fresh"), 1.0, True),
    ("declared-fresh read <= 1.0x low-level", at_k1("ratios", "read_fresh"), 1.0, True),
    ("startup, warm cache <= 1.0x FastMCP", at_k1("ratios_fastmcp", "startup_warm_cache"), 1.0, True),
    ("startup, warm cache <= 1.2x low-level", at_k1("ratios", "startup_warm_cache"), 1.2, True),
    ("full fan-out, static capsules, K=20 <= 3x K=1", static_fanout_ratio, 3.0, True),
    ("HTTP throughput, 32 clients >= 0.7x low-level", lambda r: r["http"]["throughput_ratio"]["32"], 0.7, False),
    ("--workers 2 >= 1.3x one process (bench capsule)", lambda r: r["workers"]["bench"]["ratio_median"], 1.3, False),
    ("--workers 2 >= 1.6x one process (~2 ms capsule)", lambda r: r["workers"]["burn"]["ratio_median"], 1.6, False),
]


def targets(results: dict) -> str:
    """The issue's targets, each met or missed in this run."""
    rows = ["| target | this run | |", "|---|---|---|"]
    for name, measure, limit, below in TARGETS:
        try:
            value = measure(results)
        except KeyError:
            rows.append(f"| {name} | not measured | - |")
            continue
        met = value <= limit if below else value >= limit
        rows.append(f"| {name} | {value:.2f}x | {'met' if met else 'missed'} |")
    return "\n".join(rows)


def static_table(results: dict) -> str:
    rows = ["| static describes | K | start ms | fresh principal's list ms | sandboxes made, all principals |"]
    rows.append("|---|---|---|---|---|")
    for row in results["static_fanout"]:
        rows.append(
            f"| {'on' if row['static'] else 'off'} | {row['capsules']} | {row['startup_ms']:.0f} | "
            f"{row['fresh_list_median_ms']:.3f} | {row['sandboxes_instantiated']} |"
        )
    return "\n".join(rows)


def phases_table(results: dict) -> str:
    rows = ["| uncached read, in-process (us, median) | " + " | ".join(results["phases"]["columns"]) + " |"]
    rows.append("|---" * (len(results["phases"]["columns"]) + 1) + "|")
    for name, cells in results["phases"]["rows"].items():
        rows.append(f"| {name} | " + " | ".join(f"{cells[c]:.0f}" for c in results["phases"]["columns"]) + " |")
    return "\n".join(rows)


def chart(results: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = ("list_first", "list_warm", "read_text", "read_blob")
    fig, axes = plt.subplots(1, len(metrics), figsize=(16, 4))
    counts = results["counts"]
    for axis, metric in zip(axes, metrics, strict=True):
        for system, style in (("astrid", "o-"), ("baseline", "s--"), ("fastmcp", "^:")):
            axis.plot(counts, [results[system][c][metric]["median_ms"] for c in counts], style, label=system)
        axis.set_title(metric)
        axis.set_xlabel("capsules (K)")
        axis.set_ylabel("median ms")
        axis.set_xticks(counts)
        axis.legend()
    fig.suptitle("astrid mcp serve vs a plain mcp server (baseline) and FastMCP (stdio, same client)")
    fig.tight_layout()
    fig.savefig(path, dpi=100)


def main() -> None:
    started = time.time()
    results = run()
    OUT.mkdir(exist_ok=True)
    (OUT / "results.json").write_text(json.dumps(results, indent=2))
    chart(results, OUT / "latency.png")
    loads = ", ".join(f"K={count}: {load:.1f}" for count, load in results["load"].items())
    print(f"load average (1 min) as each K's stdio rows began: {loads} on {os.cpu_count()} cores")
    print(comparison_table(results))
    print()
    rest = table(results)
    if rest.count("\n") > 1:  # more than its header (BENCH_COMPARE_ONLY leaves none)
        print(rest)
        print()
    print(targets(results))
    if "static_fanout" in results:
        print()
        print(static_table(results))
    if "phases" in results:
        print()
        print(phases_table(results))
    print(f"\nresults: {OUT / 'results.json'}, chart: {OUT / 'latency.png'} ({time.time() - started:.0f} s)")


if __name__ == "__main__":
    main()
