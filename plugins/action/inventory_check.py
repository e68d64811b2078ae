# Copyright: gpuprov contributors
# SPDX-License-Identifier: Apache-2.0
"""Action plugin inventory_check: validate every role variable of every host before any change.

The table of known variables is not written anywhere: it is read from the roles'
``meta/argument_specs.yml`` (type, elements, choices, nullable default), plus the
``gpuprov_*`` variables that no single role owns (``validate_inventory``'s vars). On top
of the types come the rules an argument spec cannot say: no negative numbers, a few
minimums and ranges, absolute paths, URLs with a scheme, non-empty lists, pins the compat
matrix knows, GPU names it knows, pins that agree with each other. Role-prefixed names that
no role declares are reported with a did-you-mean.

Runs on the controller only (run_once in roles/validate_inventory); nothing is sent to the
hosts. Every problem is one line: ``host: variable = value: what is allowed``.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from ansible.errors import AnsibleError
from ansible.plugins.action import ActionBase

URL_RE = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://\S+$")
FINGERPRINT_RE = re.compile(r"^(0[xX])?([0-9A-Fa-f]{40}|[0-9A-Fa-f]{64})$")
VARIANT_RE = re.compile(r"^(cpu|cu\d{2,3}|rocm[\d.]+)$")
# Facts that plays set and later plays read: carry a role prefix, set by no inventory.
RUNTIME_FACTS = frozenset(
    {
        "gpuprov_plan",
        "gpuprov_report_root",  # roles/gpuprov_report: gpuprov_report_dir, resolved
        "nvidia_driver_packaged_branches",
        "nvidia_driver_packaged_os",
    }
)

ALLOWED_TYPE = {
    "bool": "a YAML boolean (true or false, unquoted)",
    "int": "an integer",
    "str": "a string",
    "path": "an absolute path (starting with /)",
    "dict": "a mapping",
    "list": "a list",
    "raw": "any value",
}


@dataclass(frozen=True)
class Spec:
    """What one variable may hold (from an argument spec, or a legacy type string)."""

    name: str
    role: str
    type: str
    elements: str | None = None
    choices: tuple[Any, ...] = ()
    nullable: bool = False
    rules: Mapping[str, Any] = field(default_factory=dict)
    default: Any = None  # the argument spec's default, untemplated


@dataclass(frozen=True)
class Matrix:
    """The compat matrix as the checks need it (the gpu_compat filters, or stand-ins in tests)."""

    torch_error: Callable[[str], str | None]  # None when the torch spec is known
    branch_error: Callable[[int], str | None]  # None when the driver branch is known
    gpu_known: Callable[[str], bool]
    variants: frozenset[str]


# ---------------------------------------------------------------------------
# the table, derived from the roles


def load_specs(roles_dir: Path) -> dict[str, Spec]:
    """Every option of every role's meta/argument_specs.yml, of every entry point (main's
    first: an option of two entry points is read from main)."""
    table: dict[str, Spec] = {}
    for path in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = path.parents[1].name
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        entries = doc.get("argument_specs") or {}
        ordered = sorted(entries.items(), key=lambda item: item[0] != "main")
        for name, opt in ((n, o) for _, e in ordered for n, o in (e.get("options") or {}).items()):
            if name in table:
                continue
            table[name] = Spec(
                name=name,
                role=role,
                type=str(opt.get("type", "raw")),
                elements=opt.get("elements"),
                choices=tuple(opt.get("choices") or ()),
                nullable=opt.get("default", "") is None,
                default=opt.get("default"),
            )
    return table


def legacy_spec(name: str, kind: str, role: str = "validate_inventory") -> Spec:
    """A spec from a type string of validate_inventory's table ("int?" allows null)."""
    return Spec(name=name, role=role, type=kind.rstrip("?"), nullable=kind.endswith("?"))


def build_table(
    roles_dir: Path,
    extra_types: Mapping[str, str],
    rules: Mapping[str, Mapping[str, Any]],
) -> dict[str, Spec]:
    table = load_specs(roles_dir)
    for name, kind in extra_types.items():
        if name not in table:
            table[name] = legacy_spec(name, str(kind))
    return {
        name: Spec(
            name=s.name,
            role=s.role,
            type=s.type,
            elements=s.elements,
            choices=s.choices,
            nullable=s.nullable,
            rules=dict(rules.get(name, {})),
            default=s.default,
        )
        for name, s in table.items()
    }


# ---------------------------------------------------------------------------
# one value


def show(value: Any) -> str:
    try:
        return json.dumps(value, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return repr(value)


def kind_of(value: Any) -> str:
    """The YAML kind of a value (Ansible wraps values in tagged subclasses of these)."""
    for kind, types in (
        ("bool", bool),
        ("int", int),
        ("float", float),
        ("str", str),
        ("dict", Mapping),
        ("list", list | tuple),
    ):
        if isinstance(value, types):
            return kind
    return type(value).__name__


def _is_int(value: Any) -> bool:
    return (isinstance(value, int) and not isinstance(value, bool)) or (
        isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value) is not None
    )


def _type_ok(kind: str, value: Any) -> bool:
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return _is_int(value)
    if kind in ("str", "path"):
        return isinstance(value, str)
    if kind == "dict":
        return isinstance(value, Mapping)
    if kind == "list":
        return isinstance(value, list | tuple)
    return True


HOSTNAME_RE = re.compile(
    r"^(?=.{1,253}$)[A-Za-z0-9]([A-Za-z0-9-]{0,62})(\.[A-Za-z0-9]([A-Za-z0-9-]{0,62}))*$"
)


def _address_ok(text: str, bracketed: bool = True) -> bool:
    # `bracketed`: an IPv6 address may come as [::1] (a role that writes it into host:port
    # forms as given); otherwise only bare (a role that brackets it itself, or binds to it).
    try:
        ipaddress.ip_address(text.strip("[]") if bracketed else text)
    except ValueError:
        return bool(HOSTNAME_RE.match(text)) and not text.replace(".", "").isdigit()
    return True


def check_value(spec: Spec, value: Any) -> str | None:
    """What is wrong with `value` for `spec`, as "allowed: ..." text; None when it is fine."""
    if value is None:
        return None if spec.nullable else f"allowed: {ALLOWED_TYPE.get(spec.type, spec.type)}"
    if not _type_ok(spec.type, value):
        null = " or null" if spec.nullable else ""
        return f"{kind_of(value)}; allowed: {ALLOWED_TYPE.get(spec.type, spec.type)}{null}"
    rules = spec.rules
    if spec.type == "list":
        items = list(value)
        if rules.get("nonempty") and not items:
            return "an empty list; allowed: at least one of " + (
                ", ".join(map(str, spec.choices)) if spec.choices else "an item"
            )
        if spec.elements and spec.elements != "raw":
            bad = [i for i in items if not _type_ok(spec.elements, i)]
            if bad:
                return f"items {show(bad)} are not {ALLOWED_TYPE.get(spec.elements)}"
        if spec.choices:
            bad = [i for i in items if i not in spec.choices]
            if bad:
                return (
                    f"{show(bad)} not allowed; allowed items: {', '.join(map(str, spec.choices))}"
                )
        if rules.get("unique") and len(set(map(show, items))) != len(items):
            return "lists an item twice; allowed: each item once"
        if rules.get("url"):
            bad = [i for i in items if not URL_RE.match(str(i))]
            if bad:
                return f"{show(bad)} have no scheme; allowed: URLs such as https://host/path"
        for key in map(str, rules.get("url_keys") or ()):
            bad = [
                i[key]
                for i in items
                if isinstance(i, Mapping) and i.get(key) and not URL_RE.match(str(i[key]))
            ]
            if bad:
                return (
                    f"{key} {show(bad)} has no scheme; allowed: a URL such as "
                    f"https://host:port (or no {key})"
                )
        return None
    if spec.choices and value not in spec.choices:
        return "allowed: " + ", ".join(map(str, spec.choices))
    if spec.type == "int":
        number = int(value)
        low = int(rules.get("min", 0))
        high = rules.get("max")
        if number < low or (high is not None and number > int(high)):
            upper = f" and at most {high}" if high is not None else ""
            return f"allowed: an integer of at least {low}{upper}"
        return None
    if spec.type == "path" and not str(value).startswith("/"):
        return "a relative path; allowed: an absolute path (starting with /)"
    if spec.type == "str":
        text = str(value)
        if rules.get("url") and text and not URL_RE.match(text):
            return "has no scheme; allowed: a URL such as https://host/path (or empty)"
        schemes = [str(x) for x in rules.get("schemes") or ()]
        if schemes and text and text.split("://", 1)[0].lower() not in schemes:
            return "allowed: a URL of " + " or ".join(f"{x}://" for x in schemes)
        if rules.get("url_or_path") and text and not (URL_RE.match(text) or text.startswith("/")):
            return "allowed: an absolute path on the host or a URL with a scheme (or empty)"
        if rules.get("nonempty") and not text:
            return "empty; allowed: a non-empty string"
        if rules.get("address") and text and not _address_ok(text, not rules.get("unbracketed")):
            bare = ", without brackets" if rules.get("unbracketed") else ""
            return (
                "is not an address; allowed: an IP address or a host name, without a port "
                f"(the port has its own variable){bare}"
            )
        if rules.get("regex"):
            try:
                re.compile(text)
            except re.error as exc:
                return f"is not a regular expression ({exc}); allowed: a Python regular expression"
        if rules.get("fingerprint") and text and not FINGERPRINT_RE.match("".join(text.split())):
            return (
                "is not an OpenPGP fingerprint; allowed: 40 hex digits (v4 key) or 64 (v6), "
                "spaces allowed, or empty (no pin)"
            )
    if spec.type == "dict" and rules.get("keys"):
        bad = [k for k in map(str, value) if k.upper() not in {str(x) for x in rules["keys"]}]
        if bad:
            return f"keys {', '.join(bad)} not allowed; allowed keys: {', '.join(rules['keys'])}"
    return None


# ---------------------------------------------------------------------------
# cross-variable checks (matrix)


def _torch_pin(value: Any) -> str:
    return "" if value is None else str(value).strip()


def check_matrix(values: Mapping[str, Any], matrix: Matrix) -> list[tuple[str, Any, str]]:
    """(variable, value, problem): pins the matrix does not know, or that contradict each other."""
    out: list[tuple[str, Any, str]] = []
    branch = values.get("nvidia_driver_branch")
    if branch is not None and _is_int(branch):
        err = matrix.branch_error(int(branch))
        if err:
            out.append(("nvidia_driver_branch", branch, err))
    site_pin = _torch_pin(values.get("gpuprov_torch_version"))
    if site_pin and isinstance(values.get("gpuprov_torch_version"), str | int | float):
        err = matrix.torch_error(site_pin)
        if err:
            out.append(("gpuprov_torch_version", values["gpuprov_torch_version"], err))
    role_pin = _torch_pin(values.get("pytorch_torch_version"))
    variant = _torch_pin(values.get("pytorch_variant"))
    if role_pin and isinstance(values.get("pytorch_torch_version"), str):
        spec = f"{role_pin}+{variant}" if variant and "+" not in role_pin else role_pin
        err = matrix.torch_error(spec)
        if err:
            name = "pytorch_variant" if variant and matrix.torch_error(role_pin) is None else None
            var = name or "pytorch_torch_version"
            out.append((var, values[var], err))
    elif (
        variant
        and isinstance(values.get("pytorch_variant"), str)
        and variant not in matrix.variants
    ):
        known = ", ".join(sorted(matrix.variants, key=lambda v: (len(v), v)))
        out.append(("pytorch_variant", variant, f"no torch release has it; allowed: {known}"))
    if site_pin and role_pin:
        site_version, _, site_variant = site_pin.partition("+")
        role_version, _, role_variant = role_pin.partition("+")
        if site_version != role_version:
            out.append(
                (
                    "pytorch_torch_version",
                    role_pin,
                    f"conflicts with gpuprov_torch_version {site_pin!r}; allowed: the same "
                    "version, or only one of the two pins",
                )
            )
        elif (
            site_variant and (role_variant or variant) and site_variant != (role_variant or variant)
        ):
            out.append(
                (
                    "pytorch_variant",
                    role_variant or variant,
                    f"conflicts with gpuprov_torch_version {site_pin!r}; allowed: {site_variant}",
                )
            )
    expected = values.get("gpu_smoke_expected")
    if isinstance(expected, Mapping) and expected:
        out += _check_expected(expected, matrix)
    layers, required = values.get("gpu_smoke_layers"), values.get("gpu_smoke_required_layers")
    if isinstance(layers, list) and isinstance(required, list):
        extra = [x for x in required if x not in layers]
        if extra:
            out.append(
                (
                    "gpu_smoke_required_layers",
                    required,
                    f"requires {', '.join(map(str, extra))}, which gpu_smoke_layers does not run; "
                    "allowed: a subset of gpu_smoke_layers",
                )
            )
    return out


def _check_expected(expected: Mapping[str, Any], matrix: Matrix) -> list[tuple[str, Any, str]]:
    name = "gpu_smoke_expected"
    unknown_keys = sorted(set(map(str, expected)) - {"count", "model"})
    if unknown_keys:
        return [(name, expected, f"unknown keys {', '.join(unknown_keys)}; allowed: count, model")]
    count = expected.get("count")
    if count is not None and (not _is_int(count) or int(count) < 0):
        return [(name, expected, "count must be an integer of at least 0")]
    if "model" not in expected:
        return []
    model = expected["model"]
    models = [model] if isinstance(model, str) else model
    if not isinstance(models, list) or not all(isinstance(m, str) for m in models):
        return [(name, expected, "model must be a GPU name or a list of them")]
    if not models:
        return [(name, expected, "an empty GPU list; allowed: at least one GPU name")]
    unknown = [m for m in models if not matrix.gpu_known(m)]
    if unknown:
        return [
            (
                name,
                expected,
                f"unknown GPU {', '.join(unknown)}; allowed: names from compat/data/gpus.yaml "
                "(gpu-compat lookup NAME)",
            )
        ]
    if count is not None and int(count) == 0:
        return [(name, expected, "count 0 with a model; allowed: count of at least 1")]
    return []


# ---------------------------------------------------------------------------
# one host, all hosts


@dataclass(frozen=True)
class Shared:
    """The rules the roles apply themselves, as the same filters (plugins/filter)."""

    secret_problems: Callable[..., list[str]]  # gpuprov_secret_problems
    is_loopback: Callable[[Any], bool]  # gpuprov_is_loopback
    serving_ports: Mapping[str, Sequence[str]]  # model_serving's _model_serving_port_variables


def serving_port_variables(roles_dir: Path) -> dict[str, list[str]]:
    """model_serving's stacks -> their port variables, from the role's vars (one list)."""
    doc = yaml.safe_load((roles_dir / "model_serving" / "vars" / "main.yml").read_text())
    return {str(k): [str(v) for v in vs] for k, vs in doc["_model_serving_port_variables"].items()}


def check_cross(
    values: Mapping[str, Any], table: Mapping[str, Spec], shared: Shared
) -> list[tuple[str, Any, str]]:
    """Rules over several variables of one host (``values``: the valid ones the inventory
    sets; the roles' defaults fill the rest): (variable, value, problem)."""

    def get(name: str) -> Any:
        return values[name] if name in values else table[name].default if name in table else None

    found: list[tuple[str, Any, str]] = []
    notebook = get("jupyterlab_method") != "none"
    if notebook and "jupyterlab_token" in values:
        problems = shared.secret_problems(
            values["jupyterlab_token"],
            "jupyterlab_token",
            int(get("jupyterlab_token_min_length") or 1),
            list(get("jupyterlab_token_placeholders") or []),
        )
        if problems:
            found.append(("jupyterlab_token", HIDDEN, "; ".join(problems)))
    bind = get("jupyterlab_bind_address")
    if notebook and "jupyterlab_bind_address" in values and not shared.is_loopback(bind):
        tls = bool(get("jupyterlab_tls_cert")) and bool(get("jupyterlab_tls_key"))
        if not tls and not get("jupyterlab_allow_plaintext_network"):
            found.append(
                (
                    "jupyterlab_bind_address",
                    bind,
                    "opens the notebook server to the network without TLS; allowed: a loopback "
                    "address, or jupyterlab_tls_cert and jupyterlab_tls_key, or "
                    "jupyterlab_allow_plaintext_network: true",
                )
            )
    taken: dict[int, str] = {}
    # The role's own preflight rule: every port of every stack distinct, once any stack is on.
    ports = [v for names in shared.serving_ports.values() for v in names]
    for name in ports if get("model_serving_stacks") else []:
        port = get(name)
        if not _is_int(port):
            continue
        if int(port) in taken:
            found.append(
                (
                    name,
                    port,
                    f"also the port of {taken[int(port)]} on this host; allowed: a port no "
                    "other serving endpoint of the host uses",
                )
            )
        else:
            taken[int(port)] = name
    return found


HIDDEN = "(not shown)"  # what a secret's line shows instead of it


def _prefixes(table: Mapping[str, Spec]) -> tuple[str, ...]:
    return tuple(sorted({s.role + "_" for s in table.values()} | {"gpuprov_"}))


def check_host(
    host: str,
    values: Mapping[str, Any],
    table: Mapping[str, Spec],
    removed: Iterable[Mapping[str, str]],
    matrix: Matrix | None,
    shared: Shared | None = None,
) -> list[str]:
    """One line per problem of one host's variables (`values`: the host's variables by name)."""
    lines: list[str] = []
    removed_by_name = {r["name"]: r for r in removed}
    prefixes = _prefixes(table)
    known = list(table)
    for name in sorted(values):
        value = values[name]
        if name in removed_by_name:
            r = removed_by_name[name]
            lines.append(
                f"{host}: {name} = {show(value)} was removed in gpuprov {r['removed_in']}: "
                f"use {r['replacement']} instead ({' '.join(str(r['why']).split())})."
            )
        elif name in table:
            problem = check_value(table[name], value)
            if problem:
                lines.append(f"{host}: {name} = {show(value)}: {problem}.")
        elif name.startswith(prefixes) and name not in RUNTIME_FACTS:
            close = difflib.get_close_matches(name, known, 1, 0.75)
            hint = f"; did you mean {close[0]}?" if close else "."
            lines.append(
                f"{host}: {name} = {show(value)}: no gpuprov role declares this variable{hint}"
            )
    clean = {n: v for n, v in values.items() if n in table and check_value(table[n], v) is None}
    if matrix is not None:
        for name, value, problem in check_matrix(clean, matrix):
            lines.append(f"{host}: {name} = {show(value)}: {problem}.")
    if shared is not None:
        for name, value, problem in check_cross(clean, table, shared):
            shown = value if value is HIDDEN else show(value)
            lines.append(f"{host}: {name} = {shown}: {problem}.")
    return lines


# ---------------------------------------------------------------------------
# the action plugin


COLLECTION = "gpuprov.fleet"
# The collection's roles: this file is its plugins/action/inventory_check.py (galaxy.yml).
ROLES_DIR = Path(__file__).resolve().parents[2] / "roles"


def _filter(name: str) -> Callable[..., Any]:
    from ansible.plugins.loader import filter_loader

    # The collection's filter by FQCN (installed, or the checkout through dev_collections/),
    # else by the short name ansible.cfg's filter_plugins gives the checkout.
    plugin = filter_loader.get(f"{COLLECTION}.{name}") or filter_loader.get(name)
    if plugin is None:
        raise AnsibleError(f"inventory_check: filter {COLLECTION}.{name} not found")
    return plugin.j2_function  # type: ignore[no-any-return]


def _first_line(exc: Exception) -> str:
    text = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
    return text.split(": ", 1)[1] if text.startswith("gpu_compat_") else text


def filter_matrix() -> Matrix:
    """The matrix through the same gpu_compat filters the playbooks use."""
    check, branch_check, gpu = (
        _filter("gpu_compat_check"),
        _filter("gpu_compat_branch_check"),
        _filter("gpu_compat_gpu"),
    )

    def torch_error(spec: str) -> str | None:
        try:
            check([], spec)
        except AnsibleError as exc:
            return _first_line(exc) + " (gpu-compat matrix lists them)"
        return None

    def branch_error(number: int) -> str | None:
        verdict = branch_check(number, [])
        return None if verdict["ok"] else "; ".join(verdict["reasons"])

    import compat  # the controller's compat package (pip install -e .)

    variants = frozenset(v.name for r in compat.load().releases for v in r.variants)
    return Matrix(torch_error, branch_error, lambda n: bool(gpu(n)), variants)


class ActionModule(ActionBase):  # type: ignore[misc]  # ansible-core ships no type hints
    """Validate every host's role variables; fail with one line per problem."""

    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset({"roles_dir", "hosts", "extra_types", "rules", "removed"})

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        roles_dir = Path(args["roles_dir"]) if args.get("roles_dir") else ROLES_DIR
        table = build_table(roles_dir, args.get("extra_types") or {}, args.get("rules") or {})
        matrix = filter_matrix()
        shared = Shared(
            _filter("gpuprov_secret_problems"),
            _filter("gpuprov_is_loopback"),
            serving_port_variables(roles_dir),
        )
        hostvars = task_vars["hostvars"]
        lines: list[str] = []
        checked = 0
        deferred: list[str] = []
        for host in args["hosts"]:
            view = hostvars[host]
            values: dict[str, Any] = {}
            for name in view:
                if not isinstance(name, str) or name.startswith("_"):
                    continue
                if name not in table and not name.startswith(_prefixes(table)):
                    continue
                try:
                    values[name] = view[name]
                except AnsibleError:
                    # Depends on what only a play knows (facts, play hosts): the role's
                    # own argument spec checks it when its play runs.
                    deferred.append(f"{host}: {name}")
            checked += len(values)
            lines += check_host(host, values, table, args.get("removed") or [], matrix, shared)
        result.update(
            changed=False,
            known_variables=len(table),
            checked_values=checked,
            deferred=deferred,
        )
        if lines:
            result.update(failed=True, msg="\n".join(lines))
        else:
            result["msg"] = (
                f"{checked} values of {len(args['hosts'])} hosts valid "
                f"({len(table)} variables known from the roles' argument specs)"
            )
        return result
