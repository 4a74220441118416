"""Mixture-of-experts pricing assumptions (the cost model states them in its output).

Routing is balanced on average (an auxiliary load-balancing loss keeps it so), but within one
step the busiest expert gets more than the mean T·k/E tokens and every expert-parallel rank
waits for it. The cost model puts the busiest expert at `capacity factor × the balanced
load` (the load a capacity-limited router, GShard or Switch, lets it reach), the other experts
sharing the rest evenly, and charges the GPU holding it that load on its routed experts'
GEMMs and all-to-all traffic at ep > 1 (planner/costing/moe_a2a.py `routed_load_factor`);
at ep 1 every GPU runs every expert on all its tokens, so imbalance moves no work.
"""

from __future__ import annotations

__all__ = ["DEFAULT_CAPACITY_FACTOR"]

DEFAULT_CAPACITY_FACTOR = 1.25
"""Fedus et al., "Switch Transformers" (JMLR 2022), §2.2 and Table 1: capacity factors 1.0
and 1.25 trained; 1.25 is the common training setting (also GShard's default range 1-2)."""
