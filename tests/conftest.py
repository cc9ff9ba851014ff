"""Hypothesis profiles for the fuzz tests (tests/test_fuzz.py).

* ``ci`` (the default): a few dozen examples per test, so that the whole fuzz file runs in well under a minute on
  two shared cores.  No deadline: timings on a shared machine are noise, and a deadline error would be flaky.
* ``long``: ``pytest --hypothesis-profile=long tests/test_fuzz.py`` - 6000 examples per test (about 90 000
  in all), no deadline; measured 5-6 minutes on two shared cores.
"""
from hypothesis import HealthCheck, settings

_COMMON = dict(
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large, HealthCheck.filter_too_much],
)

settings.register_profile("ci", max_examples=60, **_COMMON)
settings.register_profile("long", max_examples=6000, **_COMMON)
settings.load_profile("ci")


# Plans (poolgrad/plans.py) cache planning decisions per call key, and several tests force a code path by
# monkeypatching a planner constant (a threshold, a module function) between two calls with the same shapes.
# Every monkeypatch change therefore empties the plan cache, so the next call plans again under the patched value.
import pytest  # noqa: E402

import poolgrad.plans  # noqa: E402

_setattr, _undo = pytest.MonkeyPatch.setattr, pytest.MonkeyPatch.undo


def _setattr_then_replan(self, *args, **kwargs):
    _setattr(self, *args, **kwargs)
    poolgrad.plans.clear()


def _undo_then_replan(self):
    _undo(self)
    poolgrad.plans.clear()


pytest.MonkeyPatch.setattr = _setattr_then_replan
pytest.MonkeyPatch.undo = _undo_then_replan
