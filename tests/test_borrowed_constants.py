"""Generations without public training data borrow another's constants (their `source` says
whose): a refit of the lender must carry over, or the borrower silently keeps stale values."""

from __future__ import annotations

import dataclasses

from cost_models.efficiency import _CONSTANTS


def test_borrowers_equal_their_lenders() -> None:
    lenders = {"ampere's values": "ampere", "hopper's values": "hopper"}
    checked = 0
    for name, c in _CONSTANTS.items():
        for phrase, lender in lenders.items():
            if phrase in c.fitted_on:
                own = dataclasses.replace(c, fitted_on="")
                assert own == dataclasses.replace(_CONSTANTS[lender], fitted_on=""), name
                checked += 1
    assert checked >= 2  # ada from ampere, blackwell from hopper
