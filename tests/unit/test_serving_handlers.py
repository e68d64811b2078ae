"""model_serving's handlers, read as data: Ansible runs handlers in the order of the handlers
file, whatever the order of the notifications, so the order there decides whether the serving
services start side by side (every restart before any wait) or one after another (each waiting
for the one before to answer)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROLE = Path(__file__).resolve().parents[2] / "roles" / "model_serving"
RESTART = "ansible.builtin.systemd_service"


def _handlers() -> list[dict[str, Any]]:
    data = yaml.safe_load((ROLE / "handlers" / "main.yml").read_text())
    assert isinstance(data, list)
    return data


def test_every_restart_comes_before_any_wait() -> None:
    handlers = _handlers()
    kinds = ["restart" if RESTART in h else "wait" for h in handlers]
    assert kinds.count("restart") == 3, [h["name"] for h in handlers]
    last_restart = max(i for i, k in enumerate(kinds) if k == "restart")
    first_wait = kinds.index("wait")
    assert last_restart < first_wait, [h["name"] for h in handlers]


def test_each_restart_is_followed_by_its_readiness_wait() -> None:
    handlers = _handlers()
    topics = {h["listen"] for h in handlers}
    assert topics == {
        "model_serving flask restart",
        "model_serving torchserve restart",
        "model_serving triton restart",
    }
    for topic in topics:
        mine = [h for h in handlers if h["listen"] == topic]
        assert RESTART in mine[0], (topic, mine[0]["name"])
        assert mine[0][RESTART]["state"] == "restarted"
        # The last handler of the topic probes the service's endpoint until it answers.
        wait = mine[-1]
        assert "ansible.builtin.uri" in wait, (topic, wait["name"])
        assert wait["retries"] == "{{ _model_serving_ready_retries }}"
        assert wait["delay"] == "{{ _model_serving_ready_delay }}"
        # Each probe bounded: not the uri module's 30 s times the many retries.
        assert wait["ansible.builtin.uri"]["timeout"] == "{{ _model_serving_probe_timeout }}"
        assert "until" in wait


def test_the_waits_last_model_serving_ready_timeout() -> None:
    """A probe a second, and as many as the timeout has seconds (the delay was 3 s, so a
    service that came up just after a failed probe cost up to 3 s more)."""
    role_vars = yaml.safe_load((ROLE / "vars" / "main.yml").read_text())
    timeout = yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())[
        "model_serving_ready_timeout"
    ]
    delay = role_vars["_model_serving_ready_delay"]
    assert delay == 1
    # retries x (delay + probe timeout) at most what the 3-s probes allowed before, each
    # with the uri module's 30 s: (timeout / 3) x (3 + 30)
    assert timeout / delay * (delay + role_vars["_model_serving_probe_timeout"]) <= (
        timeout / 3 * (3 + 30)
    )
    assert role_vars["_model_serving_ready_retries"] == (
        "{{ (model_serving_ready_timeout / _model_serving_ready_delay) | int }}"
    )
