"""The usage job (the SystemUsageAnalyzer): one query per delivery guarantee, and the windows."""
