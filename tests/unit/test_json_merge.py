"""Unit tests for plugins/modules/json_merge.py (merge-safe daemon.json edits)."""

from __future__ import annotations

import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from ansible.module_utils.testing import patch_module_args

MODULE_PATH = Path(__file__).resolve().parents[2] / "plugins" / "modules" / "json_merge.py"


def _load() -> ModuleType:
    import json_merge  # plugins/modules is on pytest's pythonpath

    return json_merge


json_merge = _load()

NVIDIA = {"runtimes": {"nvidia": {"path": "nvidia-container-runtime", "runtimeArgs": []}}}


class _Exit(Exception):
    def __init__(self, result: dict[str, Any], failed: bool) -> None:
        super().__init__(result.get("msg", ""))
        self.result = result
        self.failed = failed


def _drive(
    monkeypatch: pytest.MonkeyPatch, args: dict[str, Any], check: bool = False, diff: bool = False
) -> _Exit:
    """Run the module's main() with ``args`` and return what it exited with."""

    def exit_json(_self: object, **kwargs: Any) -> None:
        raise _Exit(kwargs, failed=False)

    def fail_json(_self: object, **kwargs: Any) -> None:
        raise _Exit(kwargs, failed=True)

    monkeypatch.setattr(json_merge.AnsibleModule, "exit_json", exit_json)
    monkeypatch.setattr(json_merge.AnsibleModule, "fail_json", fail_json)
    full = dict(args)
    full["_ansible_check_mode"] = check
    full["_ansible_diff"] = diff
    with patch_module_args(full), pytest.raises(_Exit) as caught:
        json_merge.main()
    return caught.value


@pytest.mark.parametrize(
    ("current", "merge", "expected"),
    [
        ({}, {"a": 1}, {"a": 1}),
        ({"a": 1, "b": 2}, {"a": 3}, {"a": 3, "b": 2}),
        (
            {"runtimes": {"other": {"path": "x"}}},
            NVIDIA,
            {"runtimes": {"other": {"path": "x"}, **NVIDIA["runtimes"]}},
        ),
        ({"hosts": ["unix:///a"]}, {"hosts": ["tcp://b"]}, {"hosts": ["tcp://b"]}),
        ({"a": {"b": 1}}, {"a": "flat"}, {"a": "flat"}),
    ],
    ids=["new-key", "replace-scalar", "nested-object-merges", "lists-replace", "object-by-scalar"],
)
def test_deep_merge(
    current: dict[str, Any], merge: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert json_merge.deep_merge(current, merge) == expected


def test_deep_merge_does_not_mutate_inputs() -> None:
    current: dict[str, Any] = {"runtimes": {"other": {}}}
    json_merge.deep_merge(current, NVIDIA)
    assert current == {"runtimes": {"other": {}}}


@pytest.mark.parametrize(
    ("current", "remove", "expected"),
    [
        ({"default-runtime": "nvidia", "x": 1}, {"default-runtime": "nvidia"}, {"x": 1}),
        ({"default-runtime": "runc"}, {"default-runtime": "nvidia"}, {"default-runtime": "runc"}),
        ({}, {"default-runtime": "nvidia"}, {}),
        (
            {"runtimes": {"nvidia": {"p": 1}, "o": {}}},
            {"runtimes": {"nvidia": {"p": 1}}},
            {"runtimes": {"o": {}}},
        ),
    ],
    ids=["equal-is-removed", "other-value-kept", "absent-is-noop", "nested"],
)
def test_remove_matching(
    current: dict[str, Any], remove: dict[str, Any], expected: dict[str, Any]
) -> None:
    assert json_merge.remove_matching(current, remove) == expected


def test_creates_missing_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    out = _drive(monkeypatch, {"path": str(path), "merge": {"log-driver": "journald"}})
    assert not out.failed
    assert out.result["changed"] is True
    assert out.result["created"] is True
    assert json.loads(path.read_text()) == {"log-driver": "journald"}
    assert path.stat().st_mode & 0o777 == 0o644


def test_preserves_keys_owned_by_others(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps({"storage-driver": "vfs", **NVIDIA}))
    out = _drive(monkeypatch, {"path": str(path), "merge": {"log-driver": "journald"}})
    assert out.result["changed"] is True
    assert json.loads(path.read_text()) == {
        "storage-driver": "vfs",
        "log-driver": "journald",
        **NVIDIA,
    }


def test_unchanged_content_is_not_rewritten(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    path = tmp_path / "daemon.json"
    original = '{"log-driver":"journald",\n "runtimes": ' + json.dumps(NVIDIA["runtimes"]) + "}"
    path.write_text(original)
    out = _drive(monkeypatch, {"path": str(path), "merge": {"log-driver": "journald", **NVIDIA}})
    assert out.result["changed"] is False
    assert path.read_text() == original


def test_check_mode_writes_nothing(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"a": 1}')
    out = _drive(monkeypatch, {"path": str(path), "merge": {"a": 2}}, check=True, diff=True)
    assert out.result["changed"] is True
    assert out.result["content"] == {"a": 2}
    assert json.loads(out.result["diff"]["before"]) == {"a": 1}
    assert json.loads(out.result["diff"]["after"]) == {"a": 2}
    assert path.read_text() == '{"a": 1}'


def test_check_mode_on_missing_directory(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "etc" / "docker" / "daemon.json"
    out = _drive(monkeypatch, {"path": str(path), "merge": NVIDIA}, check=True)
    assert not out.failed
    assert out.result["changed"] is True
    assert not path.exists()


@pytest.mark.parametrize(
    "text", ["[1, 2]", "{not json", '"string"'], ids=["list", "broken", "string"]
)
def test_refuses_to_clobber_non_object(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, text: str
) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(text)
    out = _drive(monkeypatch, {"path": str(path), "merge": {"a": 1}})
    assert out.failed
    assert "refusing to overwrite" in out.result["msg"]
    assert path.read_text() == text


def test_empty_file_is_an_empty_object(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text("\n")
    out = _drive(monkeypatch, {"path": str(path), "merge": {"a": 1}})
    assert out.result["changed"] is True
    assert json.loads(path.read_text()) == {"a": 1}


def test_remove_only_matching_value(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text(json.dumps({"default-runtime": "nvidia", **NVIDIA}))
    out = _drive(monkeypatch, {"path": str(path), "remove": {"default-runtime": "nvidia"}})
    assert out.result["changed"] is True
    assert json.loads(path.read_text()) == NVIDIA
    again = _drive(monkeypatch, {"path": str(path), "remove": {"default-runtime": "nvidia"}})
    assert again.result["changed"] is False


def test_existing_mode_is_kept(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text("{}")
    path.chmod(0o600)
    _drive(monkeypatch, {"path": str(path), "merge": {"a": 1}})
    assert path.stat().st_mode & 0o777 == 0o600


def test_backup(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    path = tmp_path / "daemon.json"
    path.write_text('{"a": 1}')
    out = _drive(monkeypatch, {"path": str(path), "merge": {"a": 2}, "backup": True})
    backup = Path(out.result["backup_file"])
    assert json.loads(backup.read_text()) == {"a": 1}
