"""Pictures and comparisons for people: Gantt charts (gantt), Pareto plots (pareto), cluster
comparisons (compare), what-if scenarios (scenario, whatif). Import the module you need: each
pulls in matplotlib or the search only when used."""

__all__: list[str] = []
