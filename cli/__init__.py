"""The `astrid` command line."""
