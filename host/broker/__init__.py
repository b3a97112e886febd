"""astrid.host.broker"""
