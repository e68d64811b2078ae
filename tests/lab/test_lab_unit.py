"""Unit tests of the pure parts of scripts/lab.py (no Docker needed).

The lab simulates PCI devices only: each host gets a sysfs-shaped tree at
/opt/gpuprov-sim/sys, and only the lab inventory sets
`gpu_info_sysfs_root` to it (gpu_info's `sysfs_root` parameter defaults to /sys).
"""

from __future__ import annotations

import importlib.util
import sys
import tarfile
from io import BytesIO
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


def _load_lab() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gpuprov_lab", REPO / "scripts" / "lab.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gpuprov_lab"] = module
    spec.loader.exec_module(module)
    return module


lab: Any = _load_lab()


@pytest.fixture(scope="module")
def data() -> Any:
    return lab.load_lab_data()


# --- profiles -> sysfs tree -------------------------------------------------


def test_profiles_are_the_contract_ones(data: Any) -> None:
    assert set(data.profiles) == {"k40m", "m40", "mixed", "a100", "cpu"}
    ids = {n: [d.pci_id for d in p.devices] for n, p in data.profiles.items()}
    assert ids["k40m"] == ["10de:1023"]
    assert ids["m40"] == ["10de:17fd", "10de:17fd"]
    assert sorted(ids["mixed"]) == ["10de:1023", "10de:17fd"]
    assert ids["a100"][0] in {"10de:20b0", "10de:20b2"}
    assert not data.profiles["cpu"].has_nvidia
    assert all(data.profiles[n].has_nvidia for n in ("k40m", "m40", "mixed", "a100"))


def test_sysfs_files_shape(data: Any) -> None:
    files = lab.sysfs_files(data.profiles["k40m"])
    base = "bus/pci/devices/0000:3b:00.0"
    assert files == {
        f"{base}/vendor": "0x10de\n",
        f"{base}/device": "0x1023\n",
        f"{base}/class": "0x030200\n",
        f"{base}/subsystem_vendor": "0x10de\n",
        f"{base}/subsystem_device": "0x097e\n",
    }


def test_write_sysfs_tree(tmp_path: Path, data: Any) -> None:
    # What gpu_info sees in a lab host when sysfs_root=/opt/gpuprov-sim/sys.
    lab.write_sysfs_tree(data.profiles["m40"], tmp_path)
    devices = sorted(p.name for p in (tmp_path / "bus/pci/devices").iterdir())
    assert devices == ["0000:3b:00.0", "0000:d8:00.0"]
    for dev in devices:
        d = tmp_path / "bus/pci/devices" / dev
        assert (d / "vendor").read_text().strip() == "0x10de"
        assert (d / "device").read_text().strip() == "0x17fd"


def test_cpu_profile_tree_has_no_nvidia(tmp_path: Path, data: Any) -> None:
    lab.write_sysfs_tree(data.profiles["cpu"], tmp_path)
    vendors = [p.read_text().strip() for p in tmp_path.glob("bus/pci/devices/*/vendor")]
    assert "0x10de" not in vendors


def test_tar_bytes_round_trip() -> None:
    blob = lab.tar_bytes({"opt/x/a": "1\n"}, dirs=["opt/x/empty"])
    with tarfile.open(fileobj=BytesIO(blob)) as tar:
        names = set(tar.getnames())
        member = tar.extractfile("opt/x/a")
        assert member is not None
        assert member.read() == b"1\n"
    assert {"opt", "opt/x", "opt/x/empty", "opt/x/a"} <= names


def test_bad_profile_rejected() -> None:
    raw = {
        "profiles": {
            "bad": {
                "devices": [
                    {
                        "bus_id": "3b:00.0",
                        "vendor": "0x10de",
                        "device": "0x1023",
                        "class": "0x030200",
                        "subsystem_vendor": "0x10de",
                        "subsystem_device": "0x097e",
                    }
                ]
            }
        }
    }
    with pytest.raises(lab.UsageError, match="bus_id"):
        lab.parse_lab_data(raw)


# --- host specs --------------------------------------------------------------


def test_default_preset(data: Any) -> None:
    hosts = {h.name: h for h in lab.parse_hosts("default", data)}
    assert set(hosts) == {"lab-k40m", "lab-m40", "lab-mixed", "lab-cpu"}
    assert hosts["lab-k40m"].release == "bookworm"  # Python 3.11: a torch host
    assert hosts["lab-m40"].release == "trixie"


def test_parse_hosts_explicit(data: Any) -> None:
    hosts = lab.parse_hosts("h1=k40m:trixie, h2=cpu", data)
    assert hosts == [
        lab.HostSpec("h1", "k40m", "trixie"),
        lab.HostSpec("h2", "cpu", "bookworm"),
    ]


@pytest.mark.parametrize(
    "spec",
    ["h1", "h1=nope", "h1=k40m:sid", "H1=k40m", "h1=k40m,h1=cpu", ""],
)
def test_parse_hosts_errors(spec: str, data: Any) -> None:
    with pytest.raises(lab.UsageError):
        lab.parse_hosts(spec, data)


# --- images ----------------------------------------------------------------


def test_image_tag_follows_recipe() -> None:
    a = lab.image_tag("bookworm", lab.DEFAULT_MIRROR, "recipe v1")
    assert a.startswith("gpuprov-lab/debian:bookworm-")
    assert len(a.rsplit("-", 1)[1]) == 12
    assert a == lab.image_tag("bookworm", lab.DEFAULT_MIRROR, "recipe v1")
    assert a != lab.image_tag("bookworm", lab.DEFAULT_MIRROR, "recipe v2")
    assert a != lab.image_tag("bookworm", "http://mirror.example/debian", "recipe v1")
    assert lab.image_tag("trixie", lab.DEFAULT_MIRROR, "recipe v1").startswith(
        "gpuprov-lab/debian:trixie-"
    )


# --- cgroups and docker run ------------------------------------------------------


@pytest.mark.parametrize(
    ("fs_type", "version"),
    [("cgroup2fs\n", 2), ("tmpfs\n", 1), ("", 1)],
)
def test_cgroup_version(fs_type: str, version: int) -> None:
    assert lab.cgroup_version(fs_type) == version


@pytest.mark.parametrize("cgroup", [1, 2])
def test_docker_run_args(cgroup: int) -> None:
    host = lab.HostSpec("lab-k40m", "k40m", "bookworm")
    args = lab.docker_run_args("gpuprov", host, "img:1", 22201, cgroup)
    joined = " ".join(args)
    assert "--privileged" not in args
    assert "127.0.0.1:22201:22" in args
    assert "0.0.0.0" not in joined  # noqa: S104 -- asserts the opposite
    assert "/sys/fs/cgroup:/sys/fs/cgroup:rw" in args
    assert "--cgroupns host" in joined
    assert "--cap-add SYS_ADMIN" in joined
    assert "seccomp=unconfined" in args
    assert "--name gpuprov-lab-k40m" in joined
    assert "--network gpuprov-net" in joined
    assert "target=/var/lib/docker" in joined
    assert args[args.index("img:1") + 1] == "/sbin/init"


def test_trixie_on_cgroup_v1_forces_legacy() -> None:
    assert "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1" in lab.init_command("trixie", 1)
    assert lab.init_command("trixie", 2) == ["/sbin/init"]
    assert lab.init_command("bookworm", 1) == ["/sbin/init"]


# --- ports -----------------------------------------------------------------------


def test_allocate_ports_skips_taken_and_busy() -> None:
    ports = lab.allocate_ports(3, {100, 102}, lambda p: p != 103, (100, 110))
    assert ports == [101, 104, 105]


def test_allocate_ports_exhausted() -> None:
    with pytest.raises(lab.LabError):
        lab.allocate_ports(2, {100}, lambda p: True, (100, 101))


def test_published_ports() -> None:
    column = "127.0.0.1:22200->22/tcp\n0.0.0.0:8080->80/tcp, :::8080->80/tcp\n\n"
    assert lab.published_ports(column) == {22200, 8080}


def test_port_is_free_on_bound_port() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not lab.port_is_free(sock.getsockname()[1])


# --- CA, pip, known_hosts -------------------------------------------------------

_CERT_A = "-----BEGIN CERTIFICATE-----\nQUFB\nQUFB\n-----END CERTIFICATE-----\n"
_CERT_B = "-----BEGIN CERTIFICATE-----\nQkJC\n-----END CERTIFICATE-----\n"


def test_split_and_extra_certs() -> None:
    bundle = "# comment\n" + _CERT_A + "\n" + _CERT_B
    certs = lab.split_pem_bundle(bundle)
    assert len(certs) == 2
    assert "QUFBQUFB" in certs[0]
    assert lab.extra_certs(bundle, _CERT_A) == [certs[1]]
    assert lab.extra_certs(_CERT_A, bundle) == []


def test_pip_find_links() -> None:
    out = (
        ":env:.cert='/etc/ssl/certs/ca-certificates.crt'\n"
        ":env:.find-links='/opt/wheels'\n"
        "global.find-links='/opt/wheels file:///srv/more https://x/y'\n"
    )
    assert lab.pip_find_links(out) == ["/opt/wheels", "/srv/more"]
    assert lab.pip_find_links("") == []


def test_known_hosts_lines() -> None:
    keys = ["ssh-ed25519 AAAAC3 root@lab-k40m", "ecdsa-sha2-nistp256 AAAAE2 root@x", ""]
    assert lab.known_hosts_lines(22200, keys) == [
        "[127.0.0.1]:22200 ssh-ed25519 AAAAC3",
        "[127.0.0.1]:22200 ecdsa-sha2-nistp256 AAAAE2",
    ]


# --- inventory -------------------------------------------------------------------


def _runtimes(data: Any) -> list[Any]:
    hosts = lab.parse_hosts("default", data)
    return [
        lab.HostRuntime(h, f"gpuprov-{h.name}", 22200 + i, f"172.18.0.{i + 2}")
        for i, h in enumerate(hosts)
    ]


def test_build_inventory(data: Any) -> None:
    inv = lab.build_inventory(
        "gpuprov",
        _runtimes(data),
        data.profiles,
        Path("/k/id_ed25519"),
        Path("/k/known_hosts"),
        "/opt/gpuprov-wheels",
    )
    text = lab.dump_inventory(inv, "gpuprov")
    parsed = yaml.safe_load(text)
    labg = parsed["all"]["children"]["lab"]
    hosts = labg["hosts"]
    assert set(hosts) == {"lab-k40m", "lab-m40", "lab-mixed", "lab-cpu"}
    k40m = hosts["lab-k40m"]
    assert k40m["ansible_host"] == "127.0.0.1"
    assert k40m["ansible_port"] == 22200
    assert k40m["ansible_user"] == "root"
    assert k40m["ansible_ssh_private_key_file"] == "/k/id_ed25519"
    assert "UserKnownHostsFile=/k/known_hosts" in k40m["ansible_ssh_common_args"]
    assert "StrictHostKeyChecking=no" not in text
    # Only the lab inventory points gpu_info at the simulated PCI tree.
    assert k40m["gpu_info_sysfs_root"] == "/opt/gpuprov-sim/sys"
    assert k40m["lab_profile"] == "k40m"
    assert k40m["lab_release"] == "bookworm"
    assert k40m["lab_address"] == "172.18.0.2"
    assert k40m["lab_wheelhouse"] == "/opt/gpuprov-wheels"
    gpu = labg["children"]["gpu_nodes"]["children"]
    assert set(gpu) == {"gpu_k40m", "gpu_m40", "gpu_mixed", "gpu_a100"}
    assert list(gpu["gpu_k40m"]["hosts"]) == ["lab-k40m"]
    assert list(gpu["gpu_mixed"]["hosts"]) == ["lab-mixed"]
    assert gpu["gpu_a100"]["hosts"] == {}
    assert list(labg["children"]["cpu_nodes"]["hosts"]) == ["lab-cpu"]


def test_inventory_without_wheelhouse(data: Any) -> None:
    inv = lab.build_inventory(
        "x",
        _runtimes(data),
        data.profiles,
        Path("/k"),
        Path("/kh"),
        None,
        {
            "lab": {"docker_daemon_options": {}, "lab_name": "overridden"},
            "all": {"a": 1},
            "gpu_nodes": {"g": 2},
            "gpu_k40m": {"k": 3},
            "elsewhere": {"e": 4},
        },
        "172.18.0.1",
    )
    labg = inv["all"]["children"]["lab"]
    assert all("lab_wheelhouse" not in v for v in labg["hosts"].values())
    assert labg["vars"] == {
        "lab_name": "x",
        "lab_gateway": "172.18.0.1",
        "docker_daemon_options": {},
    }
    assert inv["all"]["vars"] == {"a": 1}
    assert labg["children"]["gpu_nodes"]["vars"] == {"g": 2}
    assert labg["children"]["gpu_nodes"]["children"]["gpu_k40m"]["vars"] == {"k": 3}
    assert inv["all"]["children"]["elsewhere"] == {"vars": {"e": 4}, "hosts": {}}


def test_read_group_vars(tmp_path: Path) -> None:
    (tmp_path / "all").mkdir()
    (tmp_path / "all" / "a.yml").write_text("x: 1\ny: 1\n")
    (tmp_path / "all" / "b.yml").write_text("y: 2\n")
    (tmp_path / "lab.yml").write_text("z: 3\n")
    (tmp_path / "README").write_text("not vars")
    assert lab.read_group_vars(tmp_path) == {"all": {"x": 1, "y": 2}, "lab": {"z": 3}}
    assert lab.read_group_vars(tmp_path / "missing") == {}


def test_repo_group_vars_parse() -> None:
    gv = lab.read_group_vars(REPO / "inventories/lab/group_vars")
    assert "lab" in gv


def test_lab_paths() -> None:
    default = lab.LabPaths("gpuprov", lab.default_inventory("gpuprov"))
    assert default.inventory == REPO / "inventories/lab/hosts.yml"
    assert default.known_hosts == REPO / "inventories/lab/.ssh/known_hosts"
    other = lab.LabPaths("h7", lab.default_inventory("h7"))
    assert other.inventory == REPO / ".lab/h7/hosts.yml"
    assert other.known_hosts.name == "known_hosts.h7"
    assert lab.container_name("h7", "lab-cpu") == "h7-lab-cpu"
    assert lab.network_name("h7") == "h7-net"


def test_no_engine_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(lab.shutil, "which", lambda _name: None)
    with pytest.raises(SystemExit) as exc:
        lab.connect_engine()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "apt-get install docker.io && dockerd &" in err
    assert err.count("\n") == 1


# --- the mirror: a stand-in for NVIDIA's toolkit repository -----------------


def test_inventory_points_the_toolkit_role_at_the_mirror(data: Any) -> None:
    inv = lab.build_inventory(
        "gpuprov",
        _runtimes(data),
        data.profiles,
        Path("/k/id_ed25519"),
        Path("/k/known_hosts"),
        None,
        mirror="http://172.18.0.9:8080",
    )
    lab_vars = yaml.safe_load(lab.dump_inventory(inv, "gpuprov"))["all"]["children"]["lab"]["vars"]
    assert lab_vars["lab_mirror_url"] == "http://172.18.0.9:8080"
    assert lab_vars["nvidia_container_toolkit_apt_repo_url"] == (
        "http://172.18.0.9:8080/stable/deb/$(ARCH)"
    )
    assert lab_vars["nvidia_container_toolkit_apt_gpg_key_url"] == "http://172.18.0.9:8080/gpgkey"
    # Without a mirror, NVIDIA's defaults (the role's) apply.
    plain = lab.build_inventory(
        "gpuprov", _runtimes(data), data.profiles, Path("/k"), Path("/k"), None
    )
    assert "nvidia_container_toolkit_apt_repo_url" not in plain["all"]["children"]["lab"]["vars"]


def test_mirror_container_is_read_only_and_unpublished() -> None:
    args = lab.mirror_run_args("lab1", "img:tag", Path("/srv/x/repo"))
    assert args[:2] == ["run", "--detach"]
    assert args[args.index("--name") + 1] == "lab1-mirror"
    assert args[args.index("--network") + 1] == "lab1-net"
    assert "--publish" not in args
    assert "--read-only" in args
    mount = args[args.index("--mount") + 1]
    assert "source=/srv/x/repo" in mount
    assert mount.endswith(",readonly")
    assert args[-3:] == ["--directory", lab.MIRROR_DIR, str(lab.MIRROR_PORT)]
    assert lab.mirror_url("10.0.0.3") == f"http://10.0.0.3:{lab.MIRROR_PORT}"


def test_forget_cached_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "facts"
    cache.mkdir()
    for name in ("s1_lab-k40m", "lab-k40m", "s1_xlab-k40m", "s1_lab-k40m2", "s1_lab-cpu"):
        (cache / name).write_text("{}")
    monkeypatch.setattr(lab, "FACT_CACHES", (cache,))
    monkeypatch.setattr(lab, "STATE_ROOT", tmp_path / "state")
    removed = lab.forget_cached_facts("lab1", "lab-k40m")
    assert sorted(p.name for p in removed) == ["lab-k40m", "s1_lab-k40m"]
    assert sorted(p.name for p in cache.iterdir()) == ["s1_lab-cpu", "s1_lab-k40m2", "s1_xlab-k40m"]


def test_aptrepo_recipe_hash_depends_on_versions_and_arch() -> None:
    aptrepo = sys.modules["aptrepo"]  # imported by scripts/lab.py
    base = aptrepo.recipe_hash(("1.0-1",), "amd64")
    assert base == aptrepo.recipe_hash(("1.0-1",), "amd64")
    assert base != aptrepo.recipe_hash(("1.0-2",), "amd64")
    assert base != aptrepo.recipe_hash(("1.0-1",), "arm64")
