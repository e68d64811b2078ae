"""Where a host's PyTorch environment lives: the plan's ``environment`` block.

The pytorch role decides it (``pytorch_method``, ``pytorch_venv_path``,
``pytorch_conda_env_path``, ``pytorch_container_image``; their defaults are in
``roles/pytorch/defaults/main.yml`` and nowhere else) and jupyterlab names its kernel
(``jupyterlab_kernel_name``). Every role that runs the host's torch (dist_launch, gpu_smoke,
model_serving, gpu_monitoring, jupyterlab, object_storage) reads this block through the
``gpuprov.fleet.torch_environment`` lookup instead of typing ``/opt/gpuprov/venv`` again.

- ``pip`` and ``conda``: the environment is a directory on the host (``prefix``) with its own
  interpreter (``interpreter``). A pip environment also names the interpreter that makes it
  (``base_interpreter``, ``pytorch_python``): a role that prepares packages for it before it
  exists (jupyterlab's background download) needs the same Python.
- ``container``: torch is in ``image``; there is no interpreter on the host (``None``): a role
  that needs one refuses, naming ``pytorch_method``.
- ``none``: no environment (``pytorch_skip_reason`` says why).

A pip environment has an install lock (``install_lock``): the pytorch role's background job
holds it while it installs torch (``site.yml`` starts that job early, and an interrupted run
leaves it running). Every role that installs into the environment waits for it, at most
``install_timeout`` seconds, the job's own limit: pytorch in its install phase, jupyterlab,
object_storage, dist_launch and model_serving in their state probe (gpuprov_state's
``wait_locks``), before they read anything; and so do gpu_smoke's torch layers. This is the
one place its path is written.
"""

from __future__ import annotations

from typing import Any

from compat.model import CompatError

METHODS = ("pip", "conda", "container", "none")
KEYS = (
    "method",
    "prefix",
    "interpreter",
    "kernel_name",
    "image",
    "base_interpreter",
    "install_lock",
    "install_timeout",
)
# In a directory under /run that the pytorch role makes root's alone (0700) before the job:
# flock(1) needs only read access to a lock file, so one that other users could reach could be
# held by any of them, and every install would wait its hour.
INSTALL_LOCK = "/run/gpuprov-pytorch/pip.lock"
INSTALL_TIMEOUT_S = 3600


def environment(
    method: str,
    venv_path: str,
    conda_env_path: str,
    container_image: str = "",
    kernel_name: str = "",
    base_python: str = "",
) -> dict[str, Any]:
    """The ``environment`` block: method, prefix, interpreter, kernel name, image, and (pip
    only) the interpreter that makes the environment and the install lock and its wait."""
    if method not in METHODS:
        raise CompatError(f"pytorch_method is {method!r}; allowed: {', '.join(METHODS)}")
    prefix: str | None = None
    if method in ("pip", "conda"):
        variable, prefix = (
            ("pytorch_venv_path", venv_path)
            if method == "pip"
            else ("pytorch_conda_env_path", conda_env_path)
        )
        if not str(prefix or "").startswith("/"):
            raise CompatError(
                f"{variable} is {prefix!r}: the environment's directory must be an absolute path"
            )
        prefix = str(prefix).rstrip("/") or "/"
    return {
        "method": method,
        "prefix": prefix,
        "interpreter": f"{prefix}/bin/python" if prefix else None,
        "kernel_name": (kernel_name or None) if prefix else None,
        "image": (container_image or None) if method == "container" else None,
        "base_interpreter": (base_python or None) if method == "pip" else None,
        "install_lock": INSTALL_LOCK if method == "pip" else None,
        "install_timeout": INSTALL_TIMEOUT_S if method == "pip" else None,
    }
