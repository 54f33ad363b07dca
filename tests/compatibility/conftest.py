import pytest


@pytest.fixture
def test_archs(monkeypatch, tmp_path):
    """Enable the fake ``_test_*`` architectures; returns the path of their run log."""
    log = tmp_path / "runs.log"
    monkeypatch.setenv("HF_NEURON_COMPAT_TEST_ARCHS", "1")
    monkeypatch.setenv("HF_NEURON_COMPAT_TEST_LOG", str(log))
    monkeypatch.delenv("HF_NEURON_COMPAT_TEST_FIXED", raising=False)
    return log
