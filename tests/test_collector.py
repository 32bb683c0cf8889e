"""The compiled kernels' background load (numba's import) runs with the cyclic collector
paused (hieval.collector), and leaves it running afterwards."""

from __future__ import annotations

import gc

import pytest

from hieval.engine import counts_compiled, lca, lca_compiled


def test_the_kernels_load_with_the_collector_paused(monkeypatch):
    seen: list[bool] = []
    monkeypatch.setattr(lca_compiled, "warm", lambda: seen.append(gc.isenabled()))
    monkeypatch.setattr(counts_compiled, "warm", lambda: seen.append(gc.isenabled()))
    assert gc.isenabled()
    lca.prefetch_compiled().join()
    assert seen == [False, False]
    assert gc.isenabled()


@pytest.mark.filterwarnings("error::pytest.PytestUnhandledThreadExceptionWarning")
def test_a_failed_load_leaves_the_collector_running_and_prints_nothing(monkeypatch, capsys):
    def fail():
        raise RuntimeError("no compiler")

    monkeypatch.setattr(lca_compiled, "warm", fail)
    lca.prefetch_compiled().join()  # the failure is left for the count's own import to meet
    assert gc.isenabled()
    assert capsys.readouterr().err == ""
