"""Measure a model's layer times on this machine's GPU and write them as a profile file."""

from planner.profiler.layers import (
    KINDS,
    LayerTiming,
    profile_layers,
    profile_rows,
    write_profile_csv,
)
from planner.profiler.timing import device_sync, time_median_s

__all__ = ["KINDS", "LayerTiming", "device_sync", "profile_layers", "profile_rows",
           "time_median_s", "write_profile_csv"]
