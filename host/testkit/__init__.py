"""The test kit behind `astrid capsule test`: one capsule folder built, served in the real sandbox, and
asked as a test asks.

    served = ServedCapsule.start(folder, state_dir)     # built when it changed, loaded by a Runtime
    served.read("astrid://notes/today", principal="alice").text
    served.grant_files(tmp_path)                        # into the grants file under state_dir
    served.close()

`plugin.py` hands it to a capsule's tests as pytest's `capsule` fixture; `run.py` runs them. The kit
sits on the composition root (`runtime`), as the CLI does: it imports neither the kernel, the broker,
the MCP layer nor the watchers, and no layer imports it (`tests/test_layers.py`).
"""

from astrid.host.errors import RequestFailed
from astrid.host.testkit.results import Completion, ReadResult
from astrid.host.testkit.served import DEFAULT_PRINCIPAL, ServedCapsule

__all__ = ["DEFAULT_PRINCIPAL", "Completion", "ReadResult", "RequestFailed", "ServedCapsule"]
