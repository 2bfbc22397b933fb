"""The toolkit tests never touch the test machine's /var/lib/gpuhost: nvidia_container_runtime's record goes to a
temporary directory unless a test passes its own."""

from __future__ import annotations

import pytest

from ansible_collections.gpuhost.nvidia.plugins.modules import nvidia_container_runtime


@pytest.fixture(autouse=True)
def _runtime_record_in_tmp(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    monkeypatch.setattr(nvidia_container_runtime, "DEFAULT_RECORD", str(tmp_path_factory.mktemp("record") / "runtime.json"))
