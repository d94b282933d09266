"""`rlfoundry algos`: every algorithm this installation knows, rlfoundry's own and those plugins register through the
`rlfoundry.algorithms` entry-point group, with what each takes (its class's facts: `rlfoundry.algos.base.Agent`)."""

from __future__ import annotations

from rich.table import Table


def algos() -> None:
    """List the algorithms: name, family, memory cores, runs across processes, compilation, and where each comes
    from."""
    from rlfoundry.algos import LatentAgent, OffPolicyAgent, OnPolicyAgent, algorithms
    from rlfoundry.cli.common import out

    families = ((OnPolicyAgent, "on-policy"), (OffPolicyAgent, "off-policy"), (LatentAgent, "latent model"))
    table = Table("algo.name", "family", "memory cores", "--nproc", "compiles", "from", box=None)
    yes = {True: "yes", False: "-"}
    for name, cls in algorithms().items():
        family = next((label for base, label in families if issubclass(cls, base)), "own loop")
        table.add_row(name, family, yes[cls.memory_cores], yes[cls.distributed], yes[cls.compiles],
                      f"{cls.__module__}.{cls.__qualname__}")
    out().print(table)
