"""Base images: debootstrap + `docker import`, cached by a hash of their recipe."""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from gpuprov_lab.common import (
    IMAGE_PACKAGES,
    IMAGE_REPO,
    RECIPE_FILE,
    STATE_ROOT,
    LabError,
    log,
)
from gpuprov_lab.engine import Docker


def recipe_hash(
    release: str, mirror: str, recipe: str, packages: Sequence[str] = IMAGE_PACKAGES
) -> str:
    digest = hashlib.sha256()
    for part in (release, mirror, ",".join(packages), recipe):
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:12]


def image_tag(release: str, mirror: str, recipe: str) -> str:
    return f"{IMAGE_REPO}:{release}-{recipe_hash(release, mirror, recipe)}"


def ensure_image(docker: Docker, release: str, mirror: str) -> str:
    recipe = RECIPE_FILE.read_text(encoding="utf-8")
    tag = image_tag(release, mirror, recipe)
    if docker.exists("image", tag):
        return tag
    build_root = STATE_ROOT / "build"
    build_root.mkdir(parents=True, exist_ok=True)
    # One build per release at a time, even across labs run side by side.
    with (build_root / f"{release}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if docker.exists("image", tag):
            return tag
        return build_image(docker, release, mirror, tag)


HEARTBEAT_S = 30.0


def last_step(log_text: str) -> str:
    """The latest step line of a recipe log (debootstrap's `I: ...`, the recipe's `== ...`)."""
    for line in reversed(log_text.splitlines()):
        if line.startswith(("I: ", "== ")):
            return line.removeprefix("I: ").removeprefix("== ").strip()
    return ""


def build_image(docker: Docker, release: str, mirror: str, tag: str) -> str:
    if os.geteuid() != 0:
        raise LabError(f"building {tag} needs root (debootstrap); run lab.py as root")
    if shutil.which("debootstrap") is None:
        raise LabError("debootstrap is missing: apt-get install debootstrap")
    log(f"building image {tag} (debootstrap {release} from {mirror}) ...")
    start = time.monotonic()
    build_root = STATE_ROOT / "build"
    cache = STATE_ROOT / "cache" / f"debootstrap-{release}"
    with tempfile.TemporaryDirectory(dir=build_root, prefix=f"{release}-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        logfile = build_root / f"{release}.log"
        with logfile.open("wb") as fh:
            proc = subprocess.Popen(
                [
                    "/bin/sh",
                    str(RECIPE_FILE),
                    release,
                    mirror,
                    str(rootfs),
                    str(cache),
                    ",".join(IMAGE_PACKAGES),
                ],
                stdout=fh,
                stderr=subprocess.STDOUT,
            )
            # A progress line every HEARTBEAT_S: the recipe's latest step (debootstrap's
            # "I: Retrieving ...", "I: Configuring ...").
            while proc.poll() is None:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=HEARTBEAT_S)
                if proc.returncode is None:
                    step = last_step(logfile.read_text(encoding="utf-8", errors="replace"))
                    log(f"  {release}: {step or 'running'} ({time.monotonic() - start:.0f}s)")
        if proc.returncode != 0:
            tail = logfile.read_text(errors="replace").splitlines()[-15:]
            raise LabError(
                f"image recipe failed for {release} (log {logfile}):\n" + "\n".join(tail)
            )
        tar_bin = shutil.which("tar") or "/bin/tar"
        with subprocess.Popen(
            [tar_bin, "--numeric-owner", "-C", str(rootfs), "-cf", "-", "."],
            stdout=subprocess.PIPE,
        ) as tar:
            imp = subprocess.run(
                [
                    docker.binary,
                    "import",
                    "--change",
                    "ENV container=docker",
                    "--change",
                    'CMD ["/sbin/init"]',
                    "--change",
                    f"LABEL gpuprov.recipe={tag.rsplit('-', 1)[1]}",
                    "--message",
                    f"gpuprov lab {release} (scripts/lab/image-recipe.sh)",
                    "-",
                    tag,
                ],
                stdin=tar.stdout,
                capture_output=True,
                check=False,
            )
        if imp.returncode != 0:
            raise LabError(f"docker import failed: {imp.stderr.decode().strip()}")
        # The rootfs has root-owned device nodes etc.; rmtree as root is fine.
        shutil.rmtree(rootfs, ignore_errors=True)
    log(f"built {tag} in {time.monotonic() - start:.0f}s")
    return tag
