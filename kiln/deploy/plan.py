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


def op_name(data, op_hash: str) -> str:
    """An operation's name as kiln reports it (its ``name=``, else pyinfra's hash)."""
    return (data.global_arguments.get("name") if data is not None else None) or op_hash


def op_data(state, host) -> list[tuple[str, object]]:
    """(name, StateOperationHostData) of each operation prepared for ``host``, in order."""
    out = []
    for op_hash in host.op_hash_order:
        data = state.ops[host].get(op_hash)
        if data is not None:
            out.append((op_name(data, op_hash), data))
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


def plan_host(cluster, name: str, platform, snapshot, secrets, stages=None, in_container: bool = False,
              role_names: list[str] | None = None):
    """(commands per operation, the node's NodeContext) for inventory host ``name`` prepared against
    ``snapshot`` with no connection: what the roles' ``stages`` would do to a node in that state. The
    stages must read no fact but the snapshot; any other fact answers what a fresh node would (its
    default: a file absent, a daemon down). ``role_names``: only these of the host's roles (default all)."""
    from pyinfra.api import Config, Inventory, State
    from pyinfra.context import ctx_config, ctx_host, ctx_inventory, ctx_state

    import roles
    from roles.context import NodeContext

    inventory = Inventory(([(name, {})], {}))
    state = State(inventory, Config(), check_for_changes=False)
    host = inventory.get_host(name)
    host.get_fact = _fresh_node_fact  # this host only: it is never connected
    stages = stages or roles.STAGES
    ctx = NodeContext(cluster, cluster.hosts[name], platform, secrets, in_container, configures="configure" in stages)
    with ctx_state.use(state), ctx_inventory.use(inventory), ctx_config.use(state.config.copy()), ctx_host.use(host):
        roles.prepare(ctx, roles.for_host(cluster.hosts[name].roles, role_names), stages)
        ctx.snapshot = snapshot
        result = evaluate(state, host, commands=True)
    return result, ctx


def _fresh_node_fact(cls, *args, **kwargs):
    default = getattr(cls, "default", None)
    return default() if callable(default) else None
