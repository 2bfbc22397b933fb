#!/bin/sh
# What the absent scenario compares before the roles converge and after they are removed: the checksum of every file
# (and the target of every symbolic link) under the directories the roles write to, then the installed packages.
# Backups that the modules keep (name ending in ~) are left out: they are the user's copies, kept on purpose.
for dir in /etc/docker /etc/containerd /etc/crio /srv/gpu-demo /etc/modprobe.d /etc/apt/sources.list.d /etc/apt/keyrings \
    /etc/apt/preferences.d /etc/systemd/system /etc/gpuhost /usr/local/libexec/gpuhost /etc/cdi /run/cdi \
    /var/lib/gpuhost /var/lib/gpuhost-nvidia /etc/nvidia-container-toolkit /etc/nvidia-container-runtime /etc/dkms; do
    if [ -e "$dir" ]; then
        find "$dir" \( -type f ! -name '*~' -exec sha256sum {} + \) -o \( -type l -printf '%l  %p\n' \)
    fi
done | sort -k2
echo "--- packages"
dpkg-query -W -f '${Package}\n' | sort
