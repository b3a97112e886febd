"""astrid.host.mcp"""
