"""Pure parsers of GPU, fabric and storage tool output: text in, data out, ``CheckError`` when the
text cannot be read. No imports from kiln, roles or testinfra; standard library only (python3 >= 3.9)."""
