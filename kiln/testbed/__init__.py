"""The local testbed: a cluster of real systemd nodes on one Linux host, no VMs and no Docker."""
