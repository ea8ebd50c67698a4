"""What a host's prepared operations would do, without running them: dry runs and op-list tests.

Each operation's command generator is run in order against the node snapshot (and facts), with
its ``_if`` conditions evaluated on what the earlier operations would change, so a restart that
depends on a changed file shows up exactly when the file would change.
"""

from __future__ import annotations

from pyinfra.api.command import FileUploadCommand, FunctionCommand, StringCommand


def describe(command) -> str:
    if isinstance(command, StringCommand):
        return command.get_raw_value()
    if isinstance(command, FileUploadCommand):
        return f"upload {command.dest}"
    if isinstance(command, FunctionCommand):
        return f"python {getattr(command.function, '__name__', command.function)}"
    return str(command)


def op_data(state, host) -> list[tuple[str, object]]:
    """(name, StateOperationHostData) of each operation prepared for ``host``, in order."""
    out = []
    for op_hash in host.op_hash_order:
        data = state.ops[host].get(op_hash)
        if data is not None:
            out.append((data.global_arguments.get("name") or op_hash, data))
    return out


def evaluate(state, host, commands: bool = False) -> list[tuple[str, list[str]]]:
    """(name, commands it would run) per operation; with ``commands=False`` only whether it would run
    any (the list holds at most one entry), which is all a dry run needs. Call with pyinfra's
    context set to ``host``."""
    result = []
    for name, data in op_data(state, host):
        meta, condition = data.operation_meta, data.global_arguments.get("_if")
        conditions = condition if isinstance(condition, list) else [condition] if condition else []
        would: list[str] = []
        if all(c() for c in conditions):
            generator = data.command_generator()
            for command in generator:
                would.append(describe(command))
                if not commands:
                    break
            generator.close()
        meta._maybe_is_change = bool(would)
        result.append((name, would))
    return result
