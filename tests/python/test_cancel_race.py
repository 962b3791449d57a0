"""A cancel from another thread racing each run (tests/soak/cancel_race.py, which the soak
run drives for 100,000 runs): every run is exactly published or exactly cancelled, never
both, and the state holds exactly the old or exactly the new values, in the old or the
output's buffer. The assertions hold for any interleaving; none depends on timing."""
from __future__ import annotations

import importlib.util
import os

SOAK = os.path.join(os.path.dirname(__file__), "..", "soak", "cancel_race.py")


def load_race():
    spec = importlib.util.spec_from_file_location("cancel_race", SOAK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.race


def test_every_raced_run_is_exactly_published_or_exactly_cancelled():
    outcomes = load_race()(2000, seed=1)
    assert sum(outcomes.values()) == 2000
    assert set(outcomes) <= {"published", "cancelled"}
