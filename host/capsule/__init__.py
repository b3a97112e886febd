"""What a capsule folder is, below every layer that reads one: its manifest (`Capsule.toml`:
`manifest.py`), who it is (`provenance.py`: its publisher's key, or its folder), finding capsule
folders and their stale builds (`discovery.py`), and which of its `[publish]` and `[subscribe]`
declarations ask other capsules, so need the operator's `bus:request` (`bus_asks.py`).

The kernel loads capsules, identity signs and verifies them, the build builds them and the CLI
lists them: each reads these, none reaches into another for them.
"""
