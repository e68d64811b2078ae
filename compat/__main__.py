"""``python -m compat`` is the ``gpu-compat`` CLI."""

from __future__ import annotations

import sys

from compat.cli import main

sys.exit(main())
