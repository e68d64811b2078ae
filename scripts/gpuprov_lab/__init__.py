"""The gpuprov lab: Debian hosts in systemd containers with simulated PCI devices.

`scripts/lab.py` is the command line; this package holds its parts, importable by the
tests, the fleet report and the fabric tasks (scripts/ is their import root: Python puts
it first on sys.path for `python scripts/X.py`, pytest through `pythonpath`)."""
