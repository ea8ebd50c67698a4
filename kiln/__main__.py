"""`python -m kiln`: the same as the `kiln` command."""

from kiln.cli import main

main()
