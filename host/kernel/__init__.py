"""The kernel: wasm engine, compile cache, manifests, bus, host ABI, sandboxes, dispatch."""
