"""Pipeline schedule simulation: GPipe, 1F1B and interleaved 1F1B over heterogeneous chunks."""

from planner.simulate.closed_form import uniform_bubble_fraction, uniform_makespan_s
from planner.simulate.engine import simulate, with_events
from planner.simulate.memory import peak_activation
from planner.simulate.order import SCHEDULES, device_orders
from planner.simulate.timeline import COMPUTE_KINDS, KINDS, Event, StageTiming, Timeline

__all__ = [
    "COMPUTE_KINDS",
    "KINDS",
    "SCHEDULES",
    "Event",
    "StageTiming",
    "Timeline",
    "device_orders",
    "peak_activation",
    "simulate",
    "uniform_bubble_fraction",
    "uniform_makespan_s",
    "with_events",
]
