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
    found = algorithms()
    origins = {name: f"{cls.__module__}.{cls.__qualname__}" for name, cls in found.items()}
    # the name and where its class comes from are never cut: in a narrow terminal the other headings wrap first
    table = Table(box=None, pad_edge=False, padding=(0, 2, 0, 0))
    table.add_column("algo.name", no_wrap=True, min_width=max(map(len, found)))
    table.add_column("family", min_width=max(len(label) for _, label in families))
    for heading in ("memory cores", "--nproc", "compiles"):
        table.add_column(heading)
    table.add_column("from", no_wrap=True, min_width=max(map(len, origins.values())))
    yes = {True: "yes", False: "-"}
    for name, cls in found.items():
        family = next((label for base, label in families if issubclass(cls, base)), "own loop")
        table.add_row(name, family, yes[cls.memory_cores], yes[cls.distributed], yes[cls.compiles], origins[name])
    out().print(table)
