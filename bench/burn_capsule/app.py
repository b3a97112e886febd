"""The CPU-bound benchmark capsule: `astrid://burn/work`, whose every read computes in the guest.

Each read runs `rounds` (its `[config]`) rounds of a small hash mix: a fixed
amount of guest work, not a wall-clock wait, so a read costs the same CPU on a
busy machine as on an idle one. The default is tuned to ~2 ms per read on the
project's 2-core machine (`python -m bench.workers_load` says the median
in-process read it measured). The answer depends on the work, so no step can
be skipped.
"""

from astrid_sdk import Capsule

capsule = Capsule("burn")


@capsule.resource("astrid://burn/work", mime_type="text/plain")
def work(ctx):
    rounds = int(ctx.config("rounds") or "5500")
    value = 2166136261
    for step in range(rounds):
        value = ((value ^ step) * 16777619) & 0xFFFFFFFF
    return f"burned {rounds} rounds: {value:08x}"


WitWorld = capsule.world()
