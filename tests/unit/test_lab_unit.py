"""Unit tests of the pure parts of the lab (scripts/gpuprov_lab; no Docker needed).

The lab simulates PCI devices only: each host gets a sysfs-shaped tree at
/opt/gpuprov-sim/sys, and only the lab inventory sets
`gpu_info_sysfs_root` to it (gpu_info's `sysfs_root` parameter defaults to /sys).
"""

from __future__ import annotations

import tarfile
from concurrent.futures import ProcessPoolExecutor
from functools import partial
from io import BytesIO
from pathlib import Path
from typing import Any

import pytest
import yaml
from gpuprov_lab import aptrepo, cli, common, engine, hosts, images, inventory, profiles, site

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def data() -> Any:
    return profiles.load_lab_data()


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
    files = profiles.sysfs_files(data.profiles["k40m"])
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
    profiles.write_sysfs_tree(data.profiles["m40"], tmp_path)
    devices = sorted(p.name for p in (tmp_path / "bus/pci/devices").iterdir())
    assert devices == ["0000:3b:00.0", "0000:d8:00.0"]
    for dev in devices:
        d = tmp_path / "bus/pci/devices" / dev
        assert (d / "vendor").read_text().strip() == "0x10de"
        assert (d / "device").read_text().strip() == "0x17fd"


def test_cpu_profile_tree_has_no_nvidia(tmp_path: Path, data: Any) -> None:
    profiles.write_sysfs_tree(data.profiles["cpu"], tmp_path)
    vendors = [p.read_text().strip() for p in tmp_path.glob("bus/pci/devices/*/vendor")]
    assert "0x10de" not in vendors


def test_tar_bytes_round_trip() -> None:
    blob = profiles.tar_bytes({"opt/x/a": "1\n"}, dirs=["opt/x/empty"])
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
    with pytest.raises(common.UsageError, match="bus_id"):
        profiles.parse_lab_data(raw)


# --- host specs --------------------------------------------------------------


def test_default_preset(data: Any) -> None:
    hosts = {h.name: h for h in profiles.parse_hosts("default", data)}
    assert set(hosts) == {"lab-k40m", "lab-m40", "lab-mixed", "lab-cpu"}
    assert hosts["lab-k40m"].release == "bookworm"  # Python 3.11: a torch host
    assert hosts["lab-m40"].release == "trixie"


def test_parse_hosts_explicit(data: Any) -> None:
    hosts = profiles.parse_hosts("h1=k40m:trixie, h2=cpu", data)
    assert hosts == [
        profiles.HostSpec("h1", "k40m", "trixie"),
        profiles.HostSpec("h2", "cpu", "bookworm"),
    ]


@pytest.mark.parametrize(
    "spec",
    ["h1", "h1=nope", "h1=k40m:sid", "H1=k40m", "h1=k40m,h1=cpu", ""],
)
def test_parse_hosts_errors(spec: str, data: Any) -> None:
    with pytest.raises(common.UsageError):
        profiles.parse_hosts(spec, data)


# --- images ----------------------------------------------------------------


def test_image_tag_follows_recipe() -> None:
    a = images.image_tag("bookworm", common.DEFAULT_MIRROR, "recipe v1")
    assert a.startswith("gpuprov-lab/debian:bookworm-")
    assert len(a.rsplit("-", 1)[1]) == 12
    assert a == images.image_tag("bookworm", common.DEFAULT_MIRROR, "recipe v1")
    assert a != images.image_tag("bookworm", common.DEFAULT_MIRROR, "recipe v2")
    assert a != images.image_tag("bookworm", "http://mirror.example/debian", "recipe v1")
    assert images.image_tag("trixie", common.DEFAULT_MIRROR, "recipe v1").startswith(
        "gpuprov-lab/debian:trixie-"
    )


# --- cgroups and docker run ------------------------------------------------------


@pytest.mark.parametrize(
    ("fs_type", "version"),
    [("cgroup2fs\n", 2), ("tmpfs\n", 1), ("", 1)],
)
def test_cgroup_version(fs_type: str, version: int) -> None:
    assert engine.cgroup_version(fs_type) == version


def test_container_cpu_time_is_read_from_either_cgroup_layout(tmp_path: Path) -> None:
    """bench_site.py's CPU accounting: cgroup v1's cpuacct.usage is in nanoseconds, v2's
    cpu.stat has usage_usec (microseconds); both paths name the container's full ID."""
    v1 = engine.cpu_usage_files("abc", 1)
    v2 = engine.cpu_usage_files("abc", 2)
    assert v1[0] == "/sys/fs/cgroup/cpuacct/docker/abc/cpuacct.usage"
    assert "/sys/fs/cgroup/system.slice/docker-abc.scope/cpu.stat" in v2
    assert engine.parse_cpu_usage(v1[0], "2500000000\n") == 2.5
    stat = "usage_usec 1250000\nuser_usec 1000000\nsystem_usec 250000\n"
    assert engine.parse_cpu_usage(v2[0], stat) == 1.25
    with pytest.raises(ValueError, match="no usage_usec"):
        engine.parse_cpu_usage(v2[0], "nr_periods 0\n")
    # A container whose cgroup is not readable here: None, not 0.
    assert engine.container_cpu_seconds("no-such-container-id", 1) is None


@pytest.mark.parametrize("cgroup", [1, 2])
def test_docker_run_args(cgroup: int) -> None:
    host = profiles.HostSpec("lab-k40m", "k40m", "bookworm")
    args = hosts.docker_run_args("gpuprov", host, "img:1", 22201, cgroup)
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
    assert "SYSTEMD_CGROUP_ENABLE_LEGACY_FORCE=1" in hosts.init_command("trixie", 1)
    assert hosts.init_command("trixie", 2) == ["/sbin/init"]
    assert hosts.init_command("bookworm", 1) == ["/sbin/init"]


# --- ports -----------------------------------------------------------------------


def test_allocate_ports_skips_taken_and_busy() -> None:
    ports = engine.allocate_ports(3, {100, 102}, lambda p: p != 103, (100, 110))
    assert ports == [101, 104, 105]


def test_allocate_ports_exhausted() -> None:
    with pytest.raises(common.LabError):
        engine.allocate_ports(2, {100}, lambda p: True, (100, 101))


def test_bound_ports_counts_stopped_containers() -> None:
    running = {
        "HostConfig": {"PortBindings": {"22/tcp": [{"HostIp": "127.0.0.1", "HostPort": "22200"}]}},
        "NetworkSettings": {"Ports": {"8080/tcp": [{"HostIp": "::", "HostPort": "8080"}]}},
    }
    stopped = {
        "HostConfig": {"PortBindings": {"22/tcp": [{"HostIp": "127.0.0.1", "HostPort": "22201"}]}},
        "NetworkSettings": {"Ports": {}},
    }
    unpublished = {"HostConfig": {"PortBindings": {"22/tcp": None}}, "NetworkSettings": {}}
    assert engine.bound_ports([running, stopped, unpublished]) == {22200, 22201, 8080}


def test_containers_skips_one_removed_between_list_and_inspect() -> None:
    """Two hosts created side by side: one loses a port race and its container is removed
    while the other lists the engine's containers (seen in the lab as a 404 from `up`). The
    engine's answers are stood in for here; the race cannot be timed against a real one."""
    import docker as docker_sdk

    class Api:
        def containers(self, all: bool, filters: dict[str, str]) -> list[dict[str, str]]:
            return [{"Id": "kept"}, {"Id": "gone"}]

        def inspect_container(self, cid: str) -> dict[str, Any]:
            if cid == "gone":
                raise docker_sdk.errors.NotFound("No such container: gone")
            return {"Id": cid}

    eng = engine.Docker("docker")
    eng._sdk = type("Client", (), {"api": Api()})()
    assert eng.containers() == [{"Id": "kept"}]


def test_port_is_free_on_bound_port() -> None:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        assert not engine.port_is_free(sock.getsockname()[1])


# --- CA, pip, known_hosts -------------------------------------------------------

_CERT_A = "-----BEGIN CERTIFICATE-----\nQUFB\nQUFB\n-----END CERTIFICATE-----\n"
_CERT_B = "-----BEGIN CERTIFICATE-----\nQkJC\n-----END CERTIFICATE-----\n"


def test_split_and_extra_certs() -> None:
    bundle = "# comment\n" + _CERT_A + "\n" + _CERT_B
    certs = hosts.split_pem_bundle(bundle)
    assert len(certs) == 2
    assert "QUFBQUFB" in certs[0]
    assert hosts.extra_certs(bundle, _CERT_A) == [certs[1]]
    assert hosts.extra_certs(_CERT_A, bundle) == []


def test_pip_find_links() -> None:
    out = (
        ":env:.cert='/etc/ssl/certs/ca-certificates.crt'\n"
        ":env:.find-links='/opt/wheels'\n"
        "global.find-links='/opt/wheels file:///srv/more https://x/y'\n"
    )
    assert hosts.pip_find_links(out) == ["/opt/wheels", "/srv/more"]
    assert hosts.pip_find_links("") == []


def test_known_hosts_lines() -> None:
    keys = ["ssh-ed25519 AAAAC3 root@lab-k40m", "ecdsa-sha2-nistp256 AAAAE2 root@x", ""]
    assert inventory.known_hosts_lines(22200, keys) == [
        "[127.0.0.1]:22200 ssh-ed25519 AAAAC3",
        "[127.0.0.1]:22200 ecdsa-sha2-nistp256 AAAAE2",
    ]


# --- inventory -------------------------------------------------------------------


def _runtimes(data: Any) -> list[Any]:
    hosts = profiles.parse_hosts("default", data)
    return [
        inventory.HostRuntime(h, f"gpuprov-{h.name}", 22200 + i, f"172.18.0.{i + 2}")
        for i, h in enumerate(hosts)
    ]


def test_build_inventory(data: Any) -> None:
    inv = inventory.build_inventory(
        "gpuprov",
        _runtimes(data),
        data.profiles,
        Path("/k/id_ed25519"),
        Path("/k/known_hosts"),
        "/opt/gpuprov-wheels",
    )
    text = inventory.dump_inventory(inv, "gpuprov")
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
    inv = inventory.build_inventory(
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
    assert inventory.read_group_vars(tmp_path) == {"all": {"x": 1, "y": 2}, "lab": {"z": 3}}
    assert inventory.read_group_vars(tmp_path / "missing") == {}


def test_repo_group_vars_parse() -> None:
    gv = inventory.read_group_vars(REPO / "inventories/lab/group_vars")
    assert "lab" in gv


def test_lab_paths() -> None:
    default = inventory.LabPaths("gpuprov", inventory.default_inventory("gpuprov"))
    assert default.inventory == REPO / "inventories/lab/hosts.yml"
    assert default.known_hosts == REPO / "inventories/lab/.ssh/known_hosts"
    other = inventory.LabPaths("h7", inventory.default_inventory("h7"))
    assert other.inventory == REPO / ".lab/h7/hosts.yml"
    assert other.known_hosts.name == "known_hosts.h7"
    assert hosts.container_name("h7", "lab-cpu") == "h7-lab-cpu"
    assert hosts.network_name("h7") == "h7-net"


def test_no_engine_message(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(engine.shutil, "which", lambda _name: None)
    with pytest.raises(SystemExit) as exc:
        engine.connect_engine()
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert "apt-get install docker.io && dockerd &" in err
    assert err.count("\n") == 1


# --- the mirror: a stand-in for NVIDIA's toolkit repository -----------------


def test_inventory_points_the_toolkit_role_at_the_mirror(data: Any) -> None:
    inv = inventory.build_inventory(
        "gpuprov",
        _runtimes(data),
        data.profiles,
        Path("/k/id_ed25519"),
        Path("/k/known_hosts"),
        None,
        mirror="http://172.18.0.9:8080",
    )
    lab_vars = yaml.safe_load(inventory.dump_inventory(inv, "gpuprov"))["all"]["children"]["lab"][
        "vars"
    ]
    assert lab_vars["lab_mirror_url"] == "http://172.18.0.9:8080"
    assert lab_vars["nvidia_container_toolkit_apt_repo_url"] == (
        "http://172.18.0.9:8080/stable/deb/$(ARCH)"
    )
    assert lab_vars["nvidia_container_toolkit_apt_gpg_key_url"] == "http://172.18.0.9:8080/gpgkey"
    # Without a mirror, NVIDIA's defaults (the role's) apply.
    plain = inventory.build_inventory(
        "gpuprov", _runtimes(data), data.profiles, Path("/k"), Path("/k"), None
    )
    assert "nvidia_container_toolkit_apt_repo_url" not in plain["all"]["children"]["lab"]["vars"]


def test_mirror_container_is_read_only_and_unpublished() -> None:
    args = hosts.mirror_run_args("lab1", "img:tag", Path("/srv/x/repo"))
    assert args[:2] == ["run", "--detach"]
    assert args[args.index("--name") + 1] == "lab1-mirror"
    assert args[args.index("--network") + 1] == "lab1-net"
    assert "--publish" not in args
    assert "--read-only" in args
    mount = args[args.index("--mount") + 1]
    assert "source=/srv/x/repo" in mount
    assert mount.endswith(",readonly")
    assert args[-3:] == ["--directory", common.MIRROR_DIR, str(common.MIRROR_PORT)]
    assert hosts.mirror_url("10.0.0.3") == f"http://10.0.0.3:{common.MIRROR_PORT}"


def test_forget_cached_facts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "facts"
    cache.mkdir()
    for name in ("s1_lab-k40m", "lab-k40m", "s1_xlab-k40m", "s1_lab-k40m2", "s1_lab-cpu"):
        (cache / name).write_text("{}")
    monkeypatch.setattr(hosts, "FACT_CACHES", (cache,))
    monkeypatch.setattr(hosts, "STATE_ROOT", tmp_path / "state")
    removed = hosts.forget_cached_facts("lab1", "lab-k40m")
    assert sorted(p.name for p in removed) == ["lab-k40m", "s1_lab-k40m"]
    assert sorted(p.name for p in cache.iterdir()) == ["s1_lab-cpu", "s1_lab-k40m2", "s1_xlab-k40m"]


def test_aptrepo_recipe_hash_depends_on_versions_and_arch() -> None:
    base = aptrepo.recipe_hash(("1.0-1",), "amd64")
    assert base == aptrepo.recipe_hash(("1.0-1",), "amd64")
    assert base != aptrepo.recipe_hash(("1.0-2",), "amd64")
    assert base != aptrepo.recipe_hash(("1.0-1",), "arm64")


def _spec(name: str) -> profiles.HostSpec:
    return profiles.HostSpec(name, "k40m", "bookworm")


def test_recreate_names_known_hosts_only() -> None:
    specs = [_spec("a"), _spec("b")]
    assert cli.recreate_set(None, specs) == set()
    assert cli.recreate_set([], specs) == {"a", "b"}
    assert cli.recreate_set(["b"], specs) == {"b"}
    with pytest.raises(common.UsageError, match=r"--recreate names hosts not in the lab: c "):
        cli.recreate_set(["b", "c"], specs)


def test_up_without_hosts_keeps_the_lab_as_it_is() -> None:
    state = {"hosts": [{"name": "a", "profile": "k40m", "release": "bookworm"}]}
    assert cli.current_hosts_spec(state) == "a=k40m:bookworm"
    assert cli.current_hosts_spec({}) is None


def test_a_republished_host_runs_its_commit_labelled_with_its_base_image() -> None:
    args = hosts.docker_run_args("l", _spec("a"), "base:1", 22201, 2, run_image="state:a")
    assert "gpuprov.image=base:1" in args
    assert args[-2:] == ["state:a", "/sbin/init"]
    assert hosts.docker_run_args("l", _spec("a"), "base:1", 22201, 2)[-2] == "base:1"


@pytest.mark.parametrize(
    ("stderr", "taken"),
    [
        ("Bind for 127.0.0.1:22201 failed: port is already allocated", True),
        ("listen tcp4 127.0.0.1:22201: bind: address already in use", True),
        ("No such image: x", False),
    ],
    ids=["allocated", "in-use", "other"],
)
def test_port_taken_error(stderr: str, taken: bool) -> None:
    assert engine.port_taken_error(stderr) is taken


def test_last_verdict_only_for_this_container() -> None:
    bad = {"ok": False, "not_passed": [{"layer": "L0", "status": "fail"}]}
    assert hosts.last_verdict({"ok": True}, written=200.0, created=100.0) == "ok"
    assert hosts.last_verdict(bad, written=200.0, created=100.0) == "NOT OK: L0 fail"
    assert hosts.last_verdict({"ok": True}, written=50.0, created=100.0) == "-"
    assert hosts.last_verdict(None, written=200.0, created=100.0) == "-"
    created = hosts.created_epoch({"Created": "2026-12-01T06:00:00.123456789Z"})
    assert created == 1796104800.0


def test_site_progress_prints_plays_slow_tasks_failures_and_the_recap() -> None:
    clock = iter([0.0, 5.0, 5.0, 40.0, 40.0, 41.0]).__next__
    progress = site.SiteProgress(now=clock)
    lines = [
        "PLAY [Validate the inventory] ****",
        "TASK [validate | Fast] ****",  # 0.0
        "ok: [h1]",
        "TASK [docker : install | Slow] ****",  # 5.0 (fast task ended at 5.0)
        "changed: [h1]",
        "TASK [smoke : Failing] ****",  # 40.0 (slow one ended at 40.0)
        "fatal: [h1]: FAILED! => changed=false",
        "  msg: L0 failed",
        "",
        "PLAY RECAP ****",  # 41.0
        "h1   : ok=3    changed=1    unreachable=0    failed=1",
        "",
        "TASKS RECAP ****",
        "docker : setup-Debian | Install Docker Engine ---- 254.34s",
    ]
    out = [msg for line in lines for msg in progress.feed(line + "\n")]
    assert out == [
        "play: Validate the inventory",
        "  docker : install | Slow (35s)",
        "  smoke : Failing: fatal: [h1]: FAILED! => changed=false",
        "    msg: L0 failed",
        "recap:",
        "  h1 : ok=3 changed=1 unreachable=0 failed=1",
    ]
    assert progress.close() == []


def test_image_build_progress_names_the_latest_debootstrap_step() -> None:
    text = "I: Retrieving InRelease \nW: x\nI: Configuring systemd...\nsome output\n"
    assert images.last_step(text) == "Configuring systemd..."
    assert images.last_step("no steps yet\n") == ""


@pytest.mark.parametrize(
    ("spec", "releases"),
    [
        ("default", ["bookworm", "trixie"]),
        ("small", ["bookworm"]),
        ("trixie", ["bookworm", "trixie"]),
    ],
)
def test_images_builds_what_up_will_need_and_nothing_else(
    monkeypatch: pytest.MonkeyPatch, spec: str, releases: list[str]
) -> None:
    """`lab.py images` (make test runs it beside the unit tests): the hosts' releases and the
    mirror's (Debian 12), no host, network or state (no other Docker call)."""
    built: list[str] = []

    def ensure(_docker: object, release: str, mirror: str) -> str:
        assert mirror == "http://mirror.example/debian"
        built.append(release)
        return f"img:{release}"

    monkeypatch.setattr(cli, "ensure_image", ensure)
    monkeypatch.setattr(cli, "connect_engine", lambda: object())
    argv = ["--lab", "unit", "images", "--hosts", spec, "--mirror", "http://mirror.example/debian"]
    assert cli.main(argv) == 0
    assert sorted(built) == releases


def test_a_missing_tool_is_one_line_not_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def missing(*_args: Any) -> int:
        raise FileNotFoundError(2, "No such file or directory", "dpkg-scanpackages")

    monkeypatch.setattr(cli, "cmd_down", missing)
    with pytest.raises(SystemExit) as exc:
        cli.main(["--lab", "unit", "down"])
    assert exc.value.code == 1
    assert capsys.readouterr().err == (
        "lab.py: dpkg-scanpackages: not found; `make prereqs` installs the lab's tools\n"
    )


def test_an_inventory_renders_the_keys_asked_for_with_each_hosts_groups(tmp_path: Path) -> None:
    """`render` names keys rendered with the host's variables, group_names included (the lab's
    model_serving_stacks); other Jinja stays as written."""
    from gpuprov_lab import ansible_inventory

    hosts = tmp_path / "hosts.yml"
    hosts.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "vars": {
                        "stacks": "{{ ['flask'] if 'serve' in group_names else [] }}",
                        "other": "{{ 1 + 1 }}",
                    },
                    "hosts": {"h1": {}},
                    "children": {"serve": {"hosts": {"h2": {}}}},
                }
            }
        )
    )
    got = ansible_inventory.read(hosts, render=("stacks",)).hosts
    assert (got["h1"]["stacks"], got["h2"]["stacks"]) == ([], ["flask"])
    assert got["h2"]["other"] == "{{ 1 + 1 }}"
    assert ansible_inventory.read(hosts).hosts["h2"]["stacks"].startswith("{{")


def test_an_inventory_with_vaulted_values_reads_twice_in_one_process(tmp_path: Path) -> None:
    """ansible-core 2.19's vault context may be set up once per process; the lab's tests read
    the inventory again after `lab.py up` rewrote it (test_lab_ops). In a child process: the
    context is process-global and must not leak into this one."""
    import subprocess
    import sys

    from ansible.parsing.vault import VaultLib, VaultSecret

    password = tmp_path / "vault-password"
    password.write_text("lab-only\n")
    vault = VaultLib([("default", VaultSecret(b"lab-only"))])
    blob = vault.encrypt("s3cret").decode()
    hosts = tmp_path / "hosts.yml"
    hosts.write_text(
        "all:\n  hosts:\n    h1:\n      ansible_host: 127.0.0.1\n      secret: !vault |\n"
        + "".join(f"        {line}\n" for line in blob.splitlines())
    )
    script = (
        "import sys; from pathlib import Path; from gpuprov_lab import ansible_inventory as ai\n"
        "p = Path(sys.argv[1])\n"
        "first = ai.load(p)['h1']; second = ai.load(p)['h1']\n"
        "print(first['ansible_host'], second['ansible_host'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", script, str(hosts)],
        capture_output=True,
        text=True,
        check=False,
        env={"PYTHONPATH": str(REPO / "scripts"), "ANSIBLE_VAULT_PASSWORD_FILE": str(password)},
        timeout=120,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["127.0.0.1", "127.0.0.1"]


def test_ansible_env_carries_the_labs_vault_password_when_it_has_one(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every lab run (lab.py site, the lab tests, the kernel tier, the bench) gets the vault
    password: without it the lab's group_vars/all/vault stops the run ("no vault secrets")."""
    monkeypatch.setattr(site, "STATE_ROOT", tmp_path)
    (tmp_path / "with").mkdir()
    (tmp_path / "with" / "vault-password").write_text("x\n")
    env = site.ansible_env("with", base={})
    assert env["ANSIBLE_VAULT_PASSWORD_FILE"] == str(tmp_path / "with" / "vault-password")
    assert env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] == str(tmp_path / "with" / "facts")
    assert env["ANSIBLE_CONFIG"].endswith("/ansible.cfg")
    assert "ANSIBLE_VAULT_PASSWORD_FILE" not in site.ansible_env("without", base={})
    # the lab's own config and password replace an operator's (tests/unit/test_lab_operator_env.py)
    own = {"ANSIBLE_VAULT_PASSWORD_FILE": "/mine", "ANSIBLE_CONFIG": "/my.cfg"}
    assert site.ansible_env("with", base=own) == site.ansible_env("with", base={})


def test_log_run_keeps_every_run_numbered_with_an_index_line(tmp_path: Path) -> None:
    """The lab tests and the kernel tier keep each Ansible run the same way (site.log_run)."""
    runs = tmp_path / "runs"
    argv = ["ansible-playbook", "-i", "hosts.yml", "site.yml", "--limit", "h"]
    first = site.log_run(runs, argv, 2, 61.4, "PLAY RECAP\n", "warn\n", "test: a.py::t")
    second = site.log_run(runs, argv, None, 3600.0, b"cut \xff", None, "kernel tier: h")
    assert [first.name, second.name] == ["001.log", "002.log"]
    assert first.read_text().splitlines()[:4] == [
        "# ansible-playbook -i hosts.yml site.yml --limit h",
        "# test: a.py::t",
        "# rc=2 61s",
        "PLAY RECAP",
    ]
    assert "cut \ufffd" in second.read_text()
    assert (runs / "index.txt").read_text().splitlines() == [
        "001 rc=2     61s test: a.py::t :: site.yml --limit h",
        "002 rc=None   3600s kernel tier: h :: site.yml --limit h",
    ]


def _log_one(runs: Path, argv: list[str], out: str) -> Path:
    return site.log_run(runs, argv, 0, 1.0, out, "", "")


def test_log_run_numbers_runs_of_several_processes_apart(tmp_path: Path) -> None:
    """The fault suite's two streams (tests/lab/fault_streams.py) log into one runs/ at once."""
    runs = tmp_path / "runs"
    argv = ["ansible-playbook", "-i", "hosts.yml", "site.yml"]
    outs = [f"run {i}\n" for i in range(40)]
    with ProcessPoolExecutor(4) as pool:
        logs = list(pool.map(partial(_log_one, runs, argv), outs))
    assert sorted(log.name for log in logs) == [f"{n:03d}.log" for n in range(1, 41)]
    texts = sorted(log.read_text().splitlines()[3] for log in logs)
    assert texts == sorted(f"run {i}" for i in range(40))  # none overwrote another
    assert len((runs / "index.txt").read_text().splitlines()) == 40
