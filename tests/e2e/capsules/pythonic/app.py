"""Ordinary Python in a capsule: the standard library's clocks, randomness and print work; files,
the environment, sockets and too much memory fail with an exception that says what to use instead."""

import datetime
import json
import random
import sys
import time
import uuid

from astrid_sdk import Capsule

capsule = Capsule("pythonic")


@capsule.resource("astrid://pythonic/everyday", name="everyday", mime_type="application/json")
def everyday(ctx):
    print("everyday: read by", ctx.principal)
    sys.stderr.write("everyday: a warning line\n")
    started = time.monotonic()
    time.sleep(0.05)
    return json.dumps(
        {
            "time": time.time(),
            "time_ns": time.time_ns(),
            "now": datetime.datetime.now().isoformat(),
            "random": random.random(),
            "uuid4": str(uuid.uuid4()),
            "slept_s": time.monotonic() - started,
            "monotonic_ns": [time.monotonic_ns() for _ in range(200)],
        }
    )


@capsule.resource("astrid://pythonic/open", name="open", mime_type="text/plain")
def opened(ctx):
    with open("/etc/hostname") as file:
        return file.read()


@capsule.resource("astrid://pythonic/environ", name="environ", mime_type="text/plain")
def environ(ctx):
    import os

    return os.environ["HOME"]


@capsule.resource("astrid://pythonic/socket", name="socket", mime_type="text/plain")
def connect(ctx):
    import socket

    return str(socket.create_connection(("127.0.0.1", 80)))


@capsule.resource("astrid://pythonic/spin", name="spin", mime_type="text/plain")
def spin(ctx):
    while True:
        pass


@capsule.resource("astrid://pythonic/hoard", name="hoard", mime_type="text/plain")
def hoard(ctx):
    return str(len(bytearray(512 * 1024 * 1024)))


WitWorld = capsule.world()
