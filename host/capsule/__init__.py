"""What a capsule folder is, below every layer that reads one: its manifest (`Capsule.toml`:
`manifest.py`), who it is (`provenance.py`: its publisher's key, or its folder), and finding capsule
folders and their stale builds (`discovery.py`).

The kernel loads capsules, identity signs and verifies them, the build builds them and the CLI
lists them: each reads these, none reaches into another for them.
"""
