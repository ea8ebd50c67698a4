"""kiln's node checks: pure parsers (``checks.parsers``), suites that turn a node's command output into
verdicts (``checks.gpu``, ``checks.fabric``, ...), and two runners kept apart from them: remote
(``kiln check``: pytest + testinfra over SSH) and node-local (Slurm's HealthCheckProgram).

Standard library only, python3 >= 3.9: the same files run on the operator's machine and on nodes.
"""
