"""The packaged WIT contract (`astrid.wit`): the folder this file sits in."""

from pathlib import Path

WIT_DIR = Path(__file__).resolve().parent
CAPSULE_WORLD = "resource-capsule"
DEV_RUNNER_WORLD = "dev-runner"  # the capsule world plus astrid:dev/sources (`astrid capsule dev`)
