"""The binding's tests import flashsteps from wherever Python finds it: the build tree
(CTest sets PYTHONPATH=<build>/python) or an installed package (`pip install .`)."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # reference.py

try:
    import flashsteps  # noqa: F401
except ImportError as e:  # pragma: no cover - a setup problem, said in one line
    raise pytest.UsageError(
        f"flashsteps cannot be imported ({e}): build it (scripts/build.sh builds "
        "build/python/flashsteps; run with PYTHONPATH=build/python) or pip install .") from None

# The forward steps (flashsteps.attention), and those with kernels; the backward
# (flashsteps.attention_backward) is tested apart, in test_api.py and test_sdpa.py.
STEPS = [s["name"] for s in flashsteps.steps() if not s["backward"]]
KERNEL_STEPS = [s["name"] for s in flashsteps.steps() if s["kernels"] and not s["backward"]]


def torch_or_skip():
    """PyTorch, or a skip with its reason; where CI asked for it (ATTN_WITH_TORCH=1) a missing
    torch is a failure, so that the SDPA comparisons never silently vanish."""
    try:
        import torch
        return torch
    except ImportError as e:
        if os.environ.get("ATTN_WITH_TORCH") == "1":
            pytest.fail(f"ATTN_WITH_TORCH=1 but torch cannot be imported: {e}")
        pytest.skip(f"PyTorch is not installed ({e}); ATTN_WITH_TORCH=1 scripts/setup.sh "
                    "--python installs it")


def inputs(rng, B, H, Hkv, Sq, Sk, D):
    """0.5 + U(-1, 1) in float64, as the project's own inputs: a common component in every
    score, so that a missing max subtraction or a wrong mask shows."""
    return tuple(0.5 + rng.uniform(-1, 1, shape)
                 for shape in ((B, H, Sq, D), (B, Hkv, Sk, D), (B, Hkv, Sk, D)))


# Under CTest (ATTN_CTEST=1), a session whose every test skipped exits 77 after a line
# "skipped: <reason>", which CTest reports as Skipped and scripts/skips.py lists with its reason.
_outcomes = {"passed": 0, "failed": 0, "skipped": 0}
_skip_reasons = []


def pytest_runtest_logreport(report):
    if report.when == "call" or report.outcome != "passed":
        _outcomes[report.outcome] = _outcomes.get(report.outcome, 0) + 1
    if report.skipped and isinstance(report.longrepr, tuple):
        _skip_reasons.append(report.longrepr[2].removeprefix("Skipped: "))


def pytest_sessionfinish(session, exitstatus):
    if (os.environ.get("ATTN_CTEST") == "1" and exitstatus == 0 and _outcomes["skipped"]
            and not _outcomes["passed"] and not _outcomes["failed"]):
        print(f"\nskipped: {_skip_reasons[0] if _skip_reasons else 'every test skipped'}")
        session.exitstatus = 77
