"""Pictures and comparisons for people: Gantt charts, Pareto plots, what-if tables."""
