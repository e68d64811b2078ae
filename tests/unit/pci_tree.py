"""A simulated PCI tree, the seam every GPU test of this machine (no GPU) uses:
``<root>/bus/pci/devices/<bus>/{vendor,device,class}`` as the kernel writes them."""

from __future__ import annotations

from pathlib import Path

# (bus, vendor, device, class)
Device = tuple[str, str | None, str | None, str | None]

K40M: Device = ("0000:3b:00.0", "0x10de", "0x1023", "0x030200")  # Tesla K40m, a 3D controller


def write_pci(root: Path, *devices: Device) -> Path:
    """Write ``devices`` under ``root`` (a None value's file is left out, as for a device
    the kernel gives no such file); with none, an empty bus. Returns ``root``."""
    (root / "bus" / "pci" / "devices").mkdir(parents=True, exist_ok=True)
    for bus, vendor, device, klass in devices:
        d = root / "bus" / "pci" / "devices" / bus
        d.mkdir()
        for name, value in (("vendor", vendor), ("device", device), ("class", klass)):
            if value is not None:
                (d / name).write_text(value + "\n", encoding="ascii")
    return root
