"""A small signed apt repository that STANDS IN for NVIDIA's container toolkit repository.

THIS IS NOT NVIDIA'S SOFTWARE. NVIDIA's repository (https://nvidia.github.io/libnvidia-container)
cannot be reached from the lab, so the lab builds its own: stub ``.deb`` packages with the real
package names (``nvidia-container-toolkit``, ``nvidia-container-toolkit-base``,
``libnvidia-container-tools``, ``libnvidia-container1``), indexed with ``dpkg-scanpackages``, a
``Release`` file signed into ``InRelease`` and ``Release.gpg`` with a throwaway GPG key, and the
key published as ``gpgkey``, in the same flat layout as NVIDIA's (``<url>/stable/deb/<arch>/``
with suite ``/``, key at ``<url>/gpgkey``). The ``nvidia_container_toolkit`` role then runs its
real repository, key, install and configure path against it; only the package contents are
stubs:

- ``nvidia-container-runtime`` is a wrapper that execs ``runc`` (so
  ``docker run --runtime=nvidia`` really runs a container, without GPU injection);
- ``nvidia-ctk`` answers ``--version``, ``cdi generate`` (a stub CDI spec) and
  ``runtime configure --runtime=containerd`` (adds a ``nvidia`` runtime table).

``scripts/lab.py up`` builds it once per recipe (:func:`ensure_repo`, cached under
``.lab/NAME/aptrepo-<hash>/``), serves it from the lab's ``NAME-mirror`` container on the lab
network, and points the lab inventory's ``nvidia_container_toolkit_apt_repo_url`` /
``_apt_gpg_key_url`` at it. Real fleets never use it. ``tests/lab/aptrepo.py`` re-exports
this module for the tests.

Usage from Python::

    repo_dir, key_path = build_signed_repo(tmp_path)
    url = serve(repo_dir, gateway_ip("h8-net"))   # e.g. http://172.18.0.1:38211
    extra_vars = role_vars(url)   # nvidia_container_toolkit_apt_repo_url / _gpg_key_url
    ...
    shutdown()

From a shell::

    cd scripts && python -m gpuprov_lab.aptrepo build /tmp/repo
    cd scripts && python -m gpuprov_lab.aptrepo serve /tmp/repo/repo 172.18.0.1 --port 8765
    cd scripts && python -m gpuprov_lab.aptrepo selfcheck  # build, serve, `apt-get update` it

Needs ``dpkg-deb``, ``dpkg-scanpackages`` (dpkg-dev) and ``gpg`` on the controller.
"""

from __future__ import annotations

import argparse
import functools
import gzip
import hashlib
import http.server
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import threading
from collections.abc import Sequence
from email.utils import formatdate
from pathlib import Path

DEFAULT_VERSIONS = ("1.17.8-1", "1.18.0-1")
"""Versions built by default: two, so that version pins can be tested."""

# The Release's Origin and Label of the stand-in repository.
ORIGIN = "gpuprov-lab"
LABEL = "gpuprov lab stand-in for libnvidia-container"
KEY_UID = "gpuprov lab stand-in repository, not NVIDIA <lab@gpuprov.invalid>"

RUNTIME_WRAPPER = """\
#!/bin/sh
# gpuprov lab stub of nvidia-container-runtime: no GPU injection, just runc.
for runc in /usr/bin/runc /usr/sbin/runc /usr/local/bin/runc /usr/local/sbin/runc; do
    if [ -x "$runc" ]; then
        exec "$runc" "$@"
    fi
done
exec runc "$@"
"""

NVIDIA_CTK = """\
#!/bin/sh
# gpuprov lab stub of nvidia-ctk (version @VERSION@).
set -eu
case "${1:-}" in
--version | -v | version)
    echo "NVIDIA Container Toolkit CLI version @VERSION@ (gpuprov lab stub)"
    ;;
cdi)
    [ "${2:-}" = generate ] || { echo "stub nvidia-ctk: unsupported: $*" >&2; exit 2; }
    output=""
    for arg in "$@"; do
        case "$arg" in --output=*) output="${arg#--output=}" ;; esac
    done
    spec='---
cdiVersion: 0.5.0
kind: nvidia.com/gpu
devices: []
containerEdits: {}
'
    if [ -n "$output" ]; then
        mkdir -p "$(dirname "$output")"
        printf '%s' "$spec" >"$output"
    else
        printf '%s' "$spec"
    fi
    ;;
runtime)
    [ "${2:-}" = configure ] || { echo "stub nvidia-ctk: unsupported: $*" >&2; exit 2; }
    runtime=docker
    config=""
    default=false
    for arg in "$@"; do
        case "$arg" in
        --runtime=*) runtime="${arg#--runtime=}" ;;
        --config=*) config="${arg#--config=}" ;;
        --set-as-default) default=true ;;
        esac
    done
    [ "$runtime" = containerd ] || { echo "stub nvidia-ctk: only containerd" >&2; exit 2; }
    config="${config:-/etc/containerd/config.toml}"
    mkdir -p "$(dirname "$config")"
    if ! grep -qs '^version' "$config"; then
        printf 'version = 2\\n' >>"$config"
    fi
    prefix='[plugins."io.containerd.grpc.v1.cri".containerd'
    if ! grep -qs 'containerd.runtimes.runc]' "$config"; then
        {
            printf '\n%s.runtimes.runc]\n' "$prefix"
            printf '  runtime_type = "io.containerd.runc.v2"\n'
        } >>"$config"
    fi
    if ! grep -qs 'containerd.runtimes.nvidia]' "$config"; then
        {
            printf '\\n%s.runtimes.nvidia]\\n' "$prefix"
            printf '  runtime_type = "io.containerd.runc.v2"\\n'
            printf '%s.runtimes.nvidia.options]\\n' "$prefix"
            printf '  BinaryName = "/usr/bin/nvidia-container-runtime"\\n'
        } >>"$config"
    fi
    if [ "$default" = true ]; then
        echo "stub nvidia-ctk: --set-as-default is recorded only" >&2
        touch "$config.nvidia-default"
    fi
    ;;
*)
    echo "stub nvidia-ctk: unsupported: $*" >&2
    exit 2
    ;;
esac
"""


def _run(args: Sequence[str | Path], env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [str(a) for a in args], check=True, capture_output=True, text=True, env=env
    )
    return result.stdout


def host_arch() -> str:
    """The Debian architecture of this machine (the lab hosts share it)."""
    return _run(["dpkg", "--print-architecture"]).strip()


def _deb(
    out_dir: Path,
    work: Path,
    name: str,
    version: str,
    depends: Sequence[str],
    files: dict[str, str],
) -> Path:
    """Build one stub package; ``files`` maps absolute paths to contents (made executable)."""
    root = work / f"{name}_{version}"
    (root / "DEBIAN").mkdir(parents=True)
    control = [
        f"Package: {name}",
        f"Version: {version}",
        "Architecture: all",
        "Maintainer: gpuprov lab <lab@gpuprov.invalid>",
        "Section: utils",
        "Priority: optional",
    ]
    if depends:
        control.append("Depends: " + ", ".join(depends))
    control.append(f"Description: gpuprov lab stub of {name}")
    control.append(" Not NVIDIA's package: a stand-in for the gpuprov lab; it drives no GPU.")
    (root / "DEBIAN" / "control").write_text("\n".join(control) + "\n")
    doc = root / "usr" / "share" / "doc" / name
    doc.mkdir(parents=True)
    (doc / "README.gpuprov-stub").write_text(f"gpuprov lab stub of {name} {version}\n")
    for path, content in files.items():
        target = root / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(0o755)
    deb = out_dir / f"{name}_{version}_all.deb"
    _run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", root, deb])
    return deb


def build_packages(out_dir: Path, work: Path, version: str) -> list[Path]:
    """The four stub packages of one toolkit version, with NVIDIA's dependency chain."""
    pin = f"(= {version})"
    upstream = version.split("-", 1)[0]
    return [
        _deb(out_dir, work, "libnvidia-container1", version, [], {}),
        _deb(
            out_dir,
            work,
            "libnvidia-container-tools",
            version,
            [f"libnvidia-container1 {pin}"],
            {"/usr/bin/nvidia-container-cli": f'#!/bin/sh\necho "cli-version: {upstream}"\n'},
        ),
        _deb(
            out_dir,
            work,
            "nvidia-container-toolkit-base",
            version,
            [],
            {
                "/usr/bin/nvidia-ctk": NVIDIA_CTK.replace("@VERSION@", upstream),
                "/usr/bin/nvidia-container-runtime": RUNTIME_WRAPPER,
            },
        ),
        _deb(
            out_dir,
            work,
            "nvidia-container-toolkit",
            version,
            [f"nvidia-container-toolkit-base {pin}", f"libnvidia-container-tools {pin}"],
            {"/usr/bin/nvidia-container-runtime-hook": "#!/bin/sh\nexit 0\n"},
        ),
    ]


def _release(
    dist: Path,
    date: float | None = None,
    origin: str = ORIGIN,
    label: str = LABEL,
) -> str:
    """The Release file of a flat repository in ``dist``, dated ``date`` (default: now)."""
    files = [dist / "Packages", dist / "Packages.gz"]
    lines = [
        f"Origin: {origin}",
        f"Label: {label}",
        f"Date: {formatdate(date, usegmt=True)}",
        "Acquire-By-Hash: no",
    ]
    for field, algo in (("MD5Sum", "md5"), ("SHA256", "sha256")):
        lines.append(f"{field}:")
        for path in files:
            data = path.read_bytes()
            digest = hashlib.new(algo, data).hexdigest()
            lines.append(f" {digest} {len(data)} {path.name}")
    return "\n".join(lines) + "\n"


def index_flat(
    dist: Path,
    origin: str = ORIGIN,
    label: str = LABEL,
) -> None:
    """Packages, Packages.gz and the (unsigned) Release of the flat repository in ``dist``."""
    packages = subprocess.run(
        ["dpkg-scanpackages", "--multiversion", "."],
        cwd=dist,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    (dist / "Packages").write_text(packages)
    (dist / "Packages.gz").write_bytes(gzip.compress(packages.encode(), mtime=0))
    (dist / "Release").write_text(_release(dist, origin=origin, label=label))


def build_signed_repo(
    tmpdir: Path, versions: Sequence[str] = DEFAULT_VERSIONS, arch: str | None = None
) -> tuple[Path, Path]:
    """Build and sign the stand-in repository under ``tmpdir``.

    Returns ``(repo_dir, key_path)``: serve ``repo_dir`` over HTTP; the repository is
    ``<url>/stable/deb/<arch>`` (suite ``/``) and its ASCII-armored public key is
    ``key_path``, also served as ``<url>/gpgkey``.
    """
    tmpdir = Path(tmpdir)
    repo_dir = tmpdir / "repo"
    dist = repo_dir / "stable" / "deb" / (arch or host_arch())
    dist.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="pkgs.", dir=tmpdir))
    for version in versions:
        build_packages(dist, work, version)
    shutil.rmtree(work)

    index_flat(dist)
    key = sign(repo_dir, dist)
    key_path = tmpdir / "gpgkey.asc"
    key_path.write_text(key)
    return repo_dir, key_path


# The throwaway signing key's secret half, beside repo/ (never served): redate() signs with it.
SIGNING_KEY_FILE = "signing-key.asc"


def sign(
    repo_dir: Path,
    dist: Path,
    keep_key: bool = False,
    secret: Path | None = None,
    uid: str = KEY_UID,
) -> str:
    """Sign ``dist/Release`` (InRelease, Release.gpg); returns the ASCII-armored public key.

    By default with a NEW throwaway key, published as ``repo_dir/gpgkey`` (its secret half in
    ``repo_dir.parent/SIGNING_KEY_FILE``): called again on a built repository it rotates the key at
    the same URL (the fault suite's rotated-key case). With ``keep_key`` the saved key signs
    again and nothing is published (redate). ``secret`` (default: beside ``repo_dir``) and
    ``uid`` serve the offline bundle (scripts/bundle.py), whose key lives outside what it serves."""
    secret = secret or repo_dir.parent / SIGNING_KEY_FILE
    # A short GNUPGHOME: gpg-agent's socket path must stay under ~100 characters.
    gnupghome = Path(tempfile.mkdtemp(prefix="gpuprov-gpg."))
    env = dict(os.environ, GNUPGHOME=str(gnupghome), LC_ALL="C")
    try:
        gpg = ["gpg", "--batch", "--yes", "--pinentry-mode", "loopback", "--passphrase", ""]
        if keep_key:
            _run([*gpg, "--import", secret], env=env)
        else:
            _run([*gpg, "--quick-gen-key", uid, "ed25519", "sign", "never"], env=env)
            secret.write_text(_run([*gpg, "--armor", "--export-secret-keys", uid], env=env))
            secret.chmod(0o600)
        key = _run([*gpg, "--armor", "--export", uid], env=env)
        _run([*gpg, "--clearsign", "-o", dist / "InRelease", dist / "Release"], env=env)
        _run([*gpg, "-abs", "-o", dist / "Release.gpg", dist / "Release"], env=env)
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], env=env, check=False)
        shutil.rmtree(gnupghome, ignore_errors=True)
    if not keep_key:
        (repo_dir / "gpgkey").write_text(key)
    return key


def redate(repo_dir: Path, dist: Path, date: float) -> None:
    """Rewrite ``dist/Release`` dated ``date`` (seconds since the epoch) and sign it with the
    published key: a mirror whose clock is ahead, or a host whose clock is behind (the fault
    suite's Release that is not valid yet)."""
    (dist / "Release").write_text(_release(dist, date))
    sign(repo_dir, dist, keep_key=True)


def recipe_hash(versions: Sequence[str] = DEFAULT_VERSIONS, arch: str | None = None) -> str:
    """What the built repository depends on: this file, the versions and the architecture."""
    digest = hashlib.sha256(Path(__file__).read_bytes())
    for part in (*versions, arch or host_arch()):
        digest.update(b"\0" + part.encode())
    return digest.hexdigest()[:12]


def ensure_repo(
    cache_root: Path, versions: Sequence[str] = DEFAULT_VERSIONS, arch: str | None = None
) -> Path:
    """The repository directory under ``cache_root/aptrepo-<recipe hash>/``, built when missing.

    Built into a temporary sibling and renamed into place, so a half-built repository is
    never served. Older ``aptrepo-*`` builds in ``cache_root`` are removed.
    """
    cache_root = Path(cache_root)
    target = cache_root / f"aptrepo-{recipe_hash(versions, arch)}"
    repo_dir = target / "repo"
    if (repo_dir / "gpgkey").is_file():
        return repo_dir
    cache_root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".aptrepo-build.", dir=cache_root))
    try:
        build_signed_repo(tmp, versions, arch)
        for old in cache_root.glob("aptrepo-*"):
            shutil.rmtree(old, ignore_errors=True)
        tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    # Served by a container as another user: world-readable (the secret key is not served).
    for path in [target, *target.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o600 if path.name == SIGNING_KEY_FILE else 0o644)
    return repo_dir


class _QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, format: str, *args: object) -> None:  # stdlib's parameter name
        if os.environ.get("GPUPROV_APTREPO_LOG"):
            super().log_message(format, *args)


_SERVERS: list[http.server.ThreadingHTTPServer] = []


def serve(repo_dir: Path, host: str, port: int = 0) -> str:
    """Serve ``repo_dir`` on ``host`` (the lab network's gateway address) in a daemon thread.

    Returns the base URL. Lab hosts cannot reach the controller's 127.0.0.1, so ``host``
    is the gateway IP of the lab's Docker network. ``port=0`` picks a free port.
    Stop with :func:`shutdown`.
    """
    handler = functools.partial(_QuietHandler, directory=str(repo_dir))
    server = http.server.ThreadingHTTPServer((host, port), handler)
    thread = threading.Thread(target=server.serve_forever, name="aptrepo", daemon=True)
    thread.start()
    _SERVERS.append(server)
    bound_port = server.server_address[1]
    return f"http://{host}:{bound_port}"


def shutdown() -> None:
    """Stop every server :func:`serve` started."""
    while _SERVERS:
        server = _SERVERS.pop()
        server.shutdown()
        server.server_close()


def gateway_ip(network: str) -> str:
    """The gateway address of a Docker network (where lab hosts reach the controller)."""
    return _run(
        ["docker", "network", "inspect", network, "-f", "{{(index .IPAM.Config 0).Gateway}}"]
    ).strip()


def role_vars(url: str) -> dict[str, str]:
    """The nvidia_container_toolkit variables that point the role at a served repository."""
    return {
        "nvidia_container_toolkit_apt_repo_url": f"{url}/stable/deb/$(ARCH)",
        "nvidia_container_toolkit_apt_gpg_key_url": f"{url}/gpgkey",
    }


def selfcheck() -> int:
    """Build, serve on 127.0.0.1 and ``apt-get update`` + ``apt-cache policy`` it locally.

    Uses a private apt state directory, so the machine's own apt configuration is untouched.
    """
    with tempfile.TemporaryDirectory(prefix="aptrepo.") as tmp:
        base = Path(tmp)
        repo_dir, key_path = build_signed_repo(base)
        url = serve(repo_dir, "127.0.0.1")
        state = base / "apt"
        for sub in ("lists/partial", "cache/archives/partial", "etc/sources.list.d"):
            (state / sub).mkdir(parents=True)
        (state / "etc" / "sources.list.d" / "test.sources").write_text(
            textwrap.dedent(
                f"""\
                Types: deb
                URIs: {url}/stable/deb/$(ARCH)
                Suites: /
                Signed-By: {key_path}
                """
            )
        )
        (state / "status").touch()
        opts = [
            f"-oDir::State={state}",
            f"-oDir::State::Lists={state / 'lists'}",
            f"-oDir::State::status={state / 'status'}",
            f"-oDir::Cache={state / 'cache'}",
            f"-oDir::Etc::SourceList={state / 'none.list'}",
            f"-oDir::Etc::SourceParts={state / 'etc' / 'sources.list.d'}",
            "-oDebug::NoLocking=1",
        ]
        subprocess.run(["apt-get", *opts, "update"], check=True)
        out = _run(["apt-cache", *opts, "policy", "nvidia-container-toolkit"])
        print(out)
        shutdown()
        ok = all(v in out for v in DEFAULT_VERSIONS)
        return 0 if ok else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    sub = parser.add_subparsers(dest="command", required=True)
    build = sub.add_parser("build", help="build and sign the repository under DIR")
    build.add_argument("dir", type=Path)
    srv = sub.add_parser("serve", help="serve REPO_DIR on HOST until interrupted")
    srv.add_argument("repo_dir", type=Path)
    srv.add_argument("host")
    srv.add_argument("--port", type=int, default=0)
    sub.add_parser("selfcheck", help="build, serve locally and apt-get update it")
    args = parser.parse_args(argv)
    if args.command == "build":
        args.dir.mkdir(parents=True, exist_ok=True)
        repo_dir, key_path = build_signed_repo(args.dir)
        print(f"repo_dir={repo_dir}\nkey_path={key_path}")
        return 0
    if args.command == "serve":
        url = serve(args.repo_dir, args.host, args.port)
        print(url, flush=True)
        try:
            threading.Event().wait()
        except KeyboardInterrupt:
            shutdown()
        return 0
    return selfcheck()


if __name__ == "__main__":
    sys.exit(main())
