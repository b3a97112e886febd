"""One plug-in per host capability (`capability.Capability`), listed in `registry.py`."""
