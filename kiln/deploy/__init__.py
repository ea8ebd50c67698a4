"""Running roles on hosts (pyinfra) and reporting what happened."""
