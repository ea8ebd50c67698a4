"""Pure parsers of GPU, fabric and storage tool output: text in, data out, ``CheckError`` when the
text cannot be read. No imports from kiln, roles or testinfra; standard library only (python3 >= 3.9), but for
hostlist.py, which reads Slurm's host lists with ClusterShell (python3-clustershell on hosts)."""
