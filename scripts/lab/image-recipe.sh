#!/bin/sh
# Recipe of the gpuprov lab base images (Debian + systemd + sshd + python3).
#
# Run by `scripts/lab.py` as root on the controller:
#   image-recipe.sh RELEASE MIRROR ROOTFS_DIR CACHE_DIR PACKAGES
# It leaves a root file system in ROOTFS_DIR that lab.py turns into an image with
# `docker import` (no registry is needed). The image tag carries a hash of this
# file, the release, the mirror and the package list, so editing this recipe
# (or lab.py's IMAGE_PACKAGES) rebuilds the image; nothing else does.
set -eu

release="$1"
mirror="$2"
rootfs="$3"
cache="$4"
packages="$5"

mkdir -p "$cache"
# minbase keeps debootstrap quick; --cache-dir keeps the .debs for the next build.
debootstrap --variant=minbase --cache-dir="$cache" --include="$packages" \
    "$release" "$rootfs" "$mirror"

# Apt sources: deb822, all four components, with updates and security.
rm -f "$rootfs/etc/apt/sources.list"
security_mirror="$(printf '%s' "$mirror" | sed 's#/debian/*$#/debian-security#')"
cat >"$rootfs/etc/apt/sources.list.d/debian.sources" <<SOURCES
Types: deb
URIs: $mirror
Suites: $release $release-updates
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: $security_mirror
Suites: $release-security
Components: main contrib non-free non-free-firmware
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SOURCES

# Do not install recommends inside the lab hosts (keeps role runs quick).
cat >"$rootfs/etc/apt/apt.conf.d/90gpuprov-lab" <<'APT'
APT::Install-Recommends "false";
APT::Install-Suggests "false";
Acquire::Retries "3";
APT

# systemd in a container: no udev, no gettys, no kernel-facing mounts.
for unit in \
    systemd-udevd.service systemd-udevd-control.socket systemd-udevd-kernel.socket \
    systemd-udev-trigger.service systemd-modules-load.service \
    systemd-remount-fs.service systemd-firstboot.service \
    sys-kernel-config.mount sys-kernel-debug.mount sys-kernel-tracing.mount \
    sys-fs-fuse-connections.mount dev-hugepages.mount \
    getty.target console-getty.service getty@tty1.service \
    systemd-journald-audit.socket apt-daily.timer apt-daily-upgrade.timer \
    e2scrub_all.timer e2scrub_reap.service fstrim.timer; do
    ln -sf /dev/null "$rootfs/etc/systemd/system/$unit"
done
ln -sf /lib/systemd/system/multi-user.target "$rootfs/etc/systemd/system/default.target"

# A login account of the host's own, as fleet hosts have: inventories/lab/group_vars/gpu_k40m.yml
# names it in docker_users (the docker role adds existing accounts only, issue 25).
chroot "$rootfs" useradd --create-home --shell /bin/bash lab-user

# Each container gets its own SSH host keys (generated on first start).
rm -f "$rootfs"/etc/ssh/ssh_host_*
mkdir -p "$rootfs/etc/systemd/system/ssh.service.d"
cat >"$rootfs/etc/systemd/system/ssh.service.d/gpuprov-lab.conf" <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
ln -sf /lib/systemd/system/ssh.service \
    "$rootfs/etc/systemd/system/multi-user.target.wants/ssh.service"
cat >"$rootfs/etc/ssh/sshd_config.d/gpuprov-lab.conf" <<'SSHD'
PermitRootLogin prohibit-password
PasswordAuthentication no
UseDNS no
SSHD
mkdir -p "$rootfs/root/.ssh"
chmod 700 "$rootfs/root/.ssh"

# Nested Docker (installed later by the docker role): /proc/sys is read-only in
# an unprivileged container, and dockerd >= 26 (trixie) then fails to start
# containers unless told not to insist on disabling IPv6 on their interfaces.
# A drop-in for a unit that does not exist yet is harmless.
mkdir -p "$rootfs/etc/systemd/system/docker.service.d"
cat >"$rootfs/etc/systemd/system/docker.service.d/gpuprov-lab.conf" <<'UNIT'
[Service]
Environment=DOCKER_ALLOW_IPV6_ON_IPV4_INTERFACE=1
UNIT

# Empty machine-id: systemd fills it in on first boot.
: >"$rootfs/etc/machine-id"
rm -f "$rootfs/var/lib/dbus/machine-id"

# Small image.
rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/archives/*.deb \
    "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/tmp/*
