"""`kiln check`: the remote runner of kiln's node checks (pytest + testinfra over SSH) and its reports."""
