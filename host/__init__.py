"""astrid host: the kernel that runs capsules, the resource broker and the MCP glue."""
