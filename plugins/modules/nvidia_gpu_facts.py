#!/usr/bin/python
# Copyright (c) gpuhost.nvidia contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
# SPDX-License-Identifier: GPL-3.0-or-later

from __future__ import annotations

DOCUMENTATION = r"""
module: nvidia_gpu_facts
short_description: Gather facts about NVIDIA GPUs, their driver and their PCI functions
version_added: 0.1.0
description:
  - Describes the host's NVIDIA GPUs in RV(ansible_facts.nvidia_gpu) from three sources, best first
    NVML (through nvidia-ml-py), C(nvidia-smi -q -x), and a scan of PCI sysfs.
  - NVML is used when it works; C(nvidia-smi) only when NVML gave nothing. The PCI scan always runs. It adds the bound
    driver, IOMMU group and NUMA node to every GPU, and lists the GPUs that the richer sources cannot see, for example
    GPUs bound to C(vfio-pci).
  - A host without GPUs, without a driver, with a driver that is not loaded, or without nvidia-ml-py is a normal
    state. The module reports it in RV(ansible_facts.nvidia_gpu.state) and RV(ansible_facts.nvidia_gpu.messages)
    and does not fail.
  - The module only reads. It changes nothing on the host.
author:
  - gpuhost.nvidia developers (@gpuhost)
requirements:
  - Linux with sysfs mounted at C(/sys) for the PCI scan.
  - For the richest facts, the NVIDIA driver and the Python package C(nvidia-ml-py) on the managed host.
    Without nvidia-ml-py, the module falls back to the C(nvidia-smi) binary. Without either, it falls back to the
    PCI scan.
attributes:
  check_mode:
    support: full
    description: The module only reads, so check mode returns the same facts.
  diff_mode:
    support: none
    description: The module changes nothing, so it has no diff.
  facts:
    support: full
    description: Returns the facts under RV(ansible_facts.nvidia_gpu).
options:
  backends:
    description:
      - The richer sources to try, in the fixed order V(nvml), then V(nvidia-smi).
      - V(pci) is accepted for clarity but the PCI scan always runs, listed or not.
    type: list
    elements: str
    choices: [nvml, nvidia-smi, pci]
    default: [nvml, nvidia-smi, pci]
  gather:
    description:
      - Detail groups to collect on top of the inventory. Leave it empty to keep the gather cheap.
      - V(utilization) adds RV(ansible_facts.nvidia_gpu.gpus[].utilization),
        RV(ansible_facts.nvidia_gpu.gpus[].temperature_c) and RV(ansible_facts.nvidia_gpu.gpus[].power_draw_w).
      - V(processes) adds RV(ansible_facts.nvidia_gpu.gpus[].processes) and
        RV(ansible_facts.nvidia_gpu.gpus[].processes_error). Processes that could not be read are null with the
        reason, never an empty list; see RV(ansible_facts.nvidia_gpu.gpus[].processes_error).
      - V(topology) adds RV(ansible_facts.nvidia_gpu.gpus[].topology). Only NVML gives it; it is null from
        C(nvidia-smi).
      - V(health) adds RV(ansible_facts.nvidia_gpu.gpus[].health) (throttle reasons, PCIe link, ECC error counts,
        retired pages, remapped rows), which M(gpuhost.nvidia.nvidia_gpu_doctor) reads. Only NVML gives it; it is
        null from C(nvidia-smi).
    type: list
    elements: str
    choices: [processes, utilization, topology, health]
    default: []
  root:
    description:
      - Root of the file system to read sysfs, C(/proc), C(/dev), C(/etc/ld.so.cache) and the library directories from.
      - Meant for tests and for inspecting a mounted image. Paths in the returned facts are relative to this root.
      - An absolute path to an existing directory. A root that does not exist, is not a directory (a file, a
        symbolic link to nothing) or holds control characters fails the task, naming it, instead of reporting
        V(no_gpu). A root without C(sys/bus/pci/devices) is reported in RV(ansible_facts.nvidia_gpu.messages).
    type: path
    default: /
    aliases: [sysfs_root]
  nvml_timeout:
    description:
      - The seconds NVML may take, after C(nvmlInit), for the driver version and device count, for all the reads of one
        GPU, and for the topology. A wedged driver can block an NVML call for minutes; a step that does not finish in
        time is reported instead of hanging the task. A GPU not read in time has RV(ansible_facts.nvidia_gpu.gpus[].state)
        V(error), and its processes are unknown (null, with RV(ansible_facts.nvidia_gpu.gpus[].processes_error)); the
        GPUs after it are not asked (each would wait as long again), and their processes are unknown too.
      - Each step runs in a thread of its own, which is left blocked in NVML when it times out (C(nvmlShutdown) is
        then skipped). V(0) reads in the module's own thread, without a bound.
      - C(nvmlInit) and the C(nvidia-smi) fallback's run wake every GPU, which legitimately takes seconds per GPU without
        persistence mode; they are bounded at six times this value. An C(nvmlInit) that does not return in time leaves
        NVML unused; an C(nvidia-smi) that does not answer in time is killed. Either way the processes are unknown.
    type: float
    default: 10
seealso:
  - name: NVML API reference
    description: The NVIDIA Management Library that nvidia-ml-py wraps.
    link: https://docs.nvidia.com/deploy/nvml-api/
  - name: nvidia-smi documentation
    description: The command line tool used when NVML cannot be loaded from Python.
    link: https://docs.nvidia.com/deploy/nvidia-smi/
  - name: nvidia-ml-py on PyPI
    description: The Python bindings for NVML.
    link: https://pypi.org/project/nvidia-ml-py/
notes:
  - The C(nvidia-smi) binary is looked up in E(PATH) and run as C(nvidia-smi -q -x) with C(LC_ALL=C).
  - RV(ansible_facts.nvidia_gpu.reboot_required) is true when a GPU has an ECC or MIG mode change pending, or when the
    loaded kernel module and the installed user-space driver differ. Roles may add their own reasons to a copy of
    these facts.
"""

EXAMPLES = r"""
- name: Gather NVIDIA GPU facts
  gpuhost.nvidia.nvidia_gpu_facts:

- name: Show the GPUs
  ansible.builtin.debug:
    msg: "{{ ansible_facts.nvidia_gpu.gpus | map(attribute='name') | list }}"

- name: Gather utilization and processes, through nvidia-smi only
  gpuhost.nvidia.nvidia_gpu_facts:
    backends: [nvidia-smi]
    gather: [utilization, processes]

- name: Stop when the driver is not loaded
  ansible.builtin.assert:
    that: ansible_facts.nvidia_gpu.state != 'driver_not_loaded'
    fail_msg: "{{ ansible_facts.nvidia_gpu.messages | join('; ') }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts to add to ansible_facts.
  returned: always
  type: dict
  contains:
    nvidia_gpu:
      description: The host's NVIDIA GPUs, driver and PCI functions.
      returned: always
      type: dict
      contains:
        present:
          description:
            - Whether the host has an NVIDIA GPU, that is, an NVIDIA PCI display or 3D controller function, or a GPU
              that NVML or C(nvidia-smi) lists.
          returned: always
          type: bool
          sample: true
        source:
          description: The richest source that answered. V(pci) when neither NVML nor C(nvidia-smi) did.
          returned: always
          type: str
          sample: nvml
          choices: [nvml, nvidia-smi, pci]
        state:
          description:
            - V(ok) means that NVML or C(nvidia-smi) described the GPUs, or that every GPU is bound to a passthrough
              driver (C(vfio-pci), C(pci-stub)).
            - V(no_gpu) means that no NVIDIA GPU was found.
            - V(driver_not_loaded) means that GPUs are present but the nvidia kernel module is not loaded. NVML
              reported C(Driver Not Loaded), or C(nvidia-smi) exited with 9, or nothing richer than PCI was available
              and the module is not loaded.
            - V(library_not_found) means that the kernel module is loaded but neither NVML nor C(nvidia-smi) could be
              used. C(libnvidia-ml.so.1), nvidia-ml-py or C(nvidia-smi) is missing.
            - V(no_permission) means that NVML or C(nvidia-smi) was denied access to the GPUs.
            - V(driver_version_mismatch) means that the loaded kernel module and the user-space driver differ. This
              usually follows a driver upgrade without a reboot.
            - V(gpu_lost) means that at least one GPU has fallen off the bus. See its RV(ansible_facts.nvidia_gpu.gpus[].state).
            - V(error) covers any other NVML or C(nvidia-smi) failure. RV(ansible_facts.nvidia_gpu.messages) names it.
          returned: always
          type: str
          sample: ok
          choices: [ok, no_gpu, driver_not_loaded, library_not_found, no_permission, driver_version_mismatch, gpu_lost, error]
        messages:
          description:
            - Explains why a richer source was not used, and anything unusual that was seen.
            - The strings are for people, not for comparisons.
          returned: always
          type: list
          elements: str
          sample: ["NVML: nvmlInit failed: Driver Not Loaded (NVMLError_DriverNotLoaded)"]
        driver:
          description: The NVIDIA driver.
          returned: always
          type: dict
          contains:
            version:
              description:
                - The driver version as NVML or C(nvidia-smi) reports it. Otherwise the loaded kernel module's version,
                  or failing that the installed C(libnvidia-ml.so) version. Null when none is known.
              returned: always
              type: str
              sample: "550.54.15"
            branch:
              description: The major number of RV(ansible_facts.nvidia_gpu.driver.version).
              returned: always
              type: str
              sample: "550"
            cuda_version:
              description:
                - The highest CUDA version the driver supports, as the driver reports it.
                - Without NVML or C(nvidia-smi), this comes from the collection's branch table. Null when the branch is
                  unknown.
              returned: always
              type: str
              sample: "12.4"
            kernel_module_type:
              description:
                - V(open) or V(proprietary). This comes from C(/proc/driver/nvidia/version) when the module is loaded,
                  or else from the C(license) tag of the module built for the running kernel. Null when unknown.
              returned: always
              type: str
              sample: open
            kernel_module_loaded:
              description: Whether the nvidia kernel module is loaded.
              returned: always
              type: bool
              sample: true
            kernel_module_version:
              description: The version of the loaded nvidia kernel module. Null when it is not loaded.
              returned: always
              type: str
              sample: "550.54.15"
            nvml_version:
              description: The NVML library version. Only NVML gives it.
              returned: always
              type: str
              sample: "12.550.54.15"
            library_version:
              description: The version in the file name that C(libnvidia-ml.so.1) resolves to. This is the installed user-space driver.
              returned: always
              type: str
              sample: "550.54.15"
            library_paths:
              description:
                - Where the driver's user-space libraries are. Each comes from the ld.so cache, or else from the
                  standard library directories.
                - Each value is null when the library is not found. The module never guesses a path.
              returned: always
              type: dict
              contains:
                nvml:
                  description: Path of C(libnvidia-ml.so.1).
                  returned: always
                  type: str
                  sample: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1
                cuda:
                  description: Path of C(libcuda.so.1).
                  returned: always
                  type: str
                  sample: /usr/lib/x86_64-linux-gnu/libcuda.so.1
            library_files:
              description:
                - The file each library in RV(ansible_facts.nvidia_gpu.driver.library_paths) resolves to, symbolic links
                  followed. It may be in another directory than the link (C(/lib/libcuda.so.1) linking to a driver
                  tree elsewhere, as on NixOS-style hosts); C(gpu_compose_override)'s VM mode mounts this file.
                - Each value is null when the library is not found.
              returned: always
              type: dict
              contains:
                nvml:
                  description: The file C(libnvidia-ml.so.1) resolves to.
                  returned: always
                  type: str
                  sample: /usr/lib/x86_64-linux-gnu/libnvidia-ml.so.550.54.15
                cuda:
                  description: The file C(libcuda.so.1) resolves to.
                  returned: always
                  type: str
                  sample: /usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15
        gpus:
          description:
            - One entry per GPU. The GPUs that NVML or C(nvidia-smi) lists come first, in their index order. The GPUs
              seen only on the PCI bus follow, ordered by PCI address.
          returned: always
          type: list
          elements: dict
          contains:
            index:
              description: The NVML index. Null for a GPU seen only on the PCI bus.
              returned: always
              type: int
              sample: 0
            uuid:
              description: The GPU UUID. Null when unknown.
              returned: always
              type: str
              sample: GPU-2b4a6f7c-1d3e-4f50-8a9b-0c1d2e3f4a50
            name:
              description: The product name.
              returned: always
              type: str
              sample: NVIDIA H100 80GB HBM3
            pci_bus_id:
              description: The PCI address, lower case, with a 4-digit domain.
              returned: always
              type: str
              sample: "0000:18:00.0"
            pci_device_id:
              description: The PCI vendor and device id.
              returned: always
              type: str
              sample: "10de:2330"
            architecture:
              description: The GPU architecture, from the compute capability, else from the PCI device id.
              returned: always
              type: str
              sample: Hopper
              choices: [Tesla, Fermi, Kepler, Maxwell, Pascal, Volta, Turing, Ampere, Ada Lovelace, Hopper, Blackwell]
            compute_capability:
              description:
                - The CUDA compute capability, from NVML. Without NVML it comes from the PCI device id, and it is null
                  when the id is not in the catalog.
              returned: always
              type: str
              sample: "9.0"
            memory_total_mib:
              description: Total framebuffer memory in MiB.
              returned: always
              type: int
              sample: 81559
            persistence_mode:
              description: Whether persistence mode is enabled. Null when unknown.
              returned: always
              type: bool
              sample: true
            compute_mode:
              description: The compute mode.
              returned: always
              type: str
              sample: default
              choices: [default, exclusive_thread, prohibited, exclusive_process]
            power_limit_w:
              description: The current power limit in watts.
              returned: always
              type: float
              sample: 700.0
            power_limit_min_w:
              description: The lowest power limit that can be set, in watts.
              returned: always
              type: float
              sample: 200.0
            power_limit_max_w:
              description: The highest power limit that can be set, in watts.
              returned: always
              type: float
              sample: 700.0
            ecc:
              description: The ECC mode. Both values are null on GPUs without ECC.
              returned: always
              type: dict
              contains:
                current:
                  description: Whether ECC is enabled now.
                  returned: always
                  type: bool
                  sample: true
                pending:
                  description: Whether ECC will be enabled after the next reset or reboot.
                  returned: always
                  type: bool
                  sample: true
            mig:
              description: The MIG mode. Both values are null on GPUs without MIG.
              returned: always
              type: dict
              contains:
                current:
                  description: Whether MIG is enabled now.
                  returned: always
                  type: bool
                  sample: false
                pending:
                  description: Whether MIG will be enabled after the next GPU reset.
                  returned: always
                  type: bool
                  sample: false
            mig_devices:
              description: The MIG devices, that is, the compute instances of the GPU instances. The list is empty when MIG is off.
              returned: always
              type: list
              elements: dict
              contains:
                uuid:
                  description: The MIG device UUID. Null from C(nvidia-smi -q -x), which does not print it.
                  returned: always
                  type: str
                  sample: MIG-6f2a2a0e-3b1c-5d4e-9f80-1a2b3c4d5e6f
                gi:
                  description: GPU instance id.
                  returned: always
                  type: int
                  sample: 1
                ci:
                  description: Compute instance id.
                  returned: always
                  type: int
                  sample: 0
                profile:
                  description: The MIG profile name, from NVML. Null from C(nvidia-smi -q -x).
                  returned: always
                  type: str
                  sample: 3g.20gb
                memory_mib:
                  description: The MIG device's memory in MiB.
                  returned: always
                  type: int
                  sample: 19968
            bound_driver:
              description: The kernel driver bound to the GPU's PCI function. Null when none is bound or PCI did not see the GPU.
              returned: always
              type: str
              sample: nvidia
            iommu_group:
              description: The IOMMU group of the GPU's PCI function. Null without an IOMMU.
              returned: always
              type: int
              sample: 23
            numa_node:
              description: The NUMA node of the GPU's PCI function. Null when the platform does not say.
              returned: always
              type: int
              sample: 0
            state:
              description:
                - V(ok) means that the GPU was described by NVML or C(nvidia-smi).
                - V(pci_only) means that the GPU was seen only on the PCI bus, for example because it is bound to
                  C(vfio-pci) or no driver is loaded.
                - V(gpu_lost), V(no_permission) and V(error) mean that NVML or C(nvidia-smi) lists the GPU but could not read it.
              returned: always
              type: str
              sample: ok
              choices: [ok, pci_only, gpu_lost, no_permission, error]
            message:
              description: Why the GPU is not V(ok). Null when it is.
              returned: always
              type: str
              sample: seen on the PCI bus only (bound to vfio-pci)
            source:
              description: The source that described this GPU.
              returned: always
              type: str
              sample: nvml
              choices: [nvml, nvidia-smi, pci]
            utilization:
              description: Utilization in percent, over the driver's last sample period. Null when the GPU does not report it, for example under MIG.
              returned: when O(gather) contains V(utilization)
              type: dict
              contains:
                gpu:
                  description: Percent of time a kernel was running.
                  returned: success
                  type: int
                  sample: 35
                memory:
                  description: Percent of time device memory was read or written.
                  returned: success
                  type: int
                  sample: 12
            temperature_c:
              description: The GPU temperature in degrees Celsius.
              returned: when O(gather) contains V(utilization)
              type: int
              sample: 34
            power_draw_w:
              description: The power draw in watts.
              returned: when O(gather) contains V(utilization)
              type: float
              sample: 71.5
            processes:
              description:
                - Processes using the GPU; an empty list when the source read them and found none.
                - Null when they could not be read, with the reason in
                  RV(ansible_facts.nvidia_gpu.gpus[].processes_error). Guards treat null as "unknown", never as idle.
                - From NVML, the compute and graphics processes of the GPU, and with MIG on those of each MIG device
                  (through its own handle). From C(nvidia-smi), its C(<processes>) element.
              returned: when O(gather) contains V(processes)
              type: list
              elements: dict
              contains:
                pid:
                  description: Process id.
                  returned: success
                  type: int
                  sample: 4242
                type:
                  description: V(C) for compute, V(G) for graphics, V(C+G) for both.
                  returned: success
                  type: str
                  sample: C
                name:
                  description: The process name. Null when it cannot be read.
                  returned: success
                  type: str
                  sample: python3
                used_memory_mib:
                  description: The GPU memory the process uses, in MiB. Null when not reported.
                  returned: success
                  type: int
                  sample: 1024
                gpu_instance_id:
                  description: The MIG GPU instance the process runs in. Null without MIG.
                  returned: success
                  type: int
                  sample: 1
                compute_instance_id:
                  description: The MIG compute instance the process runs in. Null without MIG.
                  returned: success
                  type: int
                  sample: 0
            processes_error:
              description:
                - Null when RV(ansible_facts.nvidia_gpu.gpus[].processes) was read. Otherwise why it could not be,
                  and the processes are null - for example an NVML error on a process query (V(NoPermission),
                  V(NotSupported), V(Unknown), V(Uninitialized), V(GpuIsLost)), a MIG device that could not be read,
                  NVML not answering within O(nvml_timeout), a C(nvidia-smi) GPU element without
                  C(<processes>) or with V(N/A) there, a process without a readable pid, a GPU whose state is not
                  V(ok), or a GPU seen only on PCI.
              returned: when O(gather) contains V(processes)
              type: str
              sample: "nvmlDeviceGetComputeRunningProcesses failed: Insufficient Permissions (NVMLError_NoPermission)"
            topology:
              description: How this GPU connects to the others. Null from C(nvidia-smi) and for GPUs seen only on PCI.
              returned: when O(gather) contains V(topology)
              type: dict
              contains:
                nvlink_active_links:
                  description: The number of active NVLink links.
                  returned: success
                  type: int
                  sample: 18
                peers:
                  description: One entry per other GPU.
                  returned: success
                  type: list
                  elements: dict
                  contains:
                    index:
                      description: The peer's NVML index.
                      returned: success
                      type: int
                      sample: 1
                    pci_bus_id:
                      description: The peer's PCI address.
                      returned: success
                      type: str
                      sample: "0000:2a:00.0"
                    link:
                      description:
                        - The connection, named as in the C(nvidia-smi topo -m) legend. V(NV18) means 18 NVLinks,
                          directly or through NVSwitches.
                        - V(PIX), V(PXB), V(PHB), V(NODE) and V(SYS) are PCIe paths.
                      returned: success
                      type: str
                      sample: NV18
            health:
              description:
                - What NVML says about the GPU's health. Null from C(nvidia-smi) and for GPUs seen only on PCI.
                - Each value is null when the GPU or driver does not support it.
              returned: when O(gather) contains V(health)
              type: dict
              contains:
                throttle_reasons:
                  description:
                    - The active clock throttle (clock event) reasons, among V(gpu_idle),
                      V(applications_clocks_setting), V(sw_power_cap), V(hw_slowdown), V(sync_boost),
                      V(sw_thermal_slowdown), V(hw_thermal_slowdown), V(hw_power_brake_slowdown) and
                      V(display_clock_setting).
                  returned: success
                  type: list
                  elements: str
                  sample: [gpu_idle]
                pcie:
                  description: The PCIe link, with keys C(gen_current), C(gen_max), C(width_current) and C(width_max).
                  returned: success
                  type: dict
                  sample: {gen_current: 5, gen_max: 5, width_current: 16, width_max: 16}
                ecc_errors:
                  description:
                    - ECC error counts, with keys C(corrected_volatile), C(uncorrected_volatile),
                      C(corrected_aggregate) and C(uncorrected_aggregate).
                  returned: success
                  type: dict
                  sample: {corrected_volatile: 0, uncorrected_volatile: 0, corrected_aggregate: 2, uncorrected_aggregate: 0}
                retired_pages:
                  description: Pages retired for single-bit and double-bit ECC errors, and whether a retirement waits for a reboot.
                  returned: success
                  type: dict
                  sample: {single_bit: 0, double_bit: 0, pending: false}
                remapped_rows:
                  description: Row remapping (Ampere and later), with keys C(correctable), C(uncorrectable), C(pending) and C(failure).
                  returned: success
                  type: dict
                  sample: {correctable: 0, uncorrectable: 0, pending: false, failure: false}
        pci_functions:
          description: Every NVIDIA PCI function, ordered by address. This includes GPU audio, USB and USB-C controllers, and NVSwitches.
          returned: always
          type: list
          elements: dict
          contains:
            pci_bus_id:
              description: The PCI address.
              returned: always
              type: str
              sample: "0000:01:00.1"
            pci_device_id:
              description: The vendor and device id.
              returned: always
              type: str
              sample: "10de:1aef"
            subsystem_id:
              description: The subsystem vendor and device id.
              returned: always
              type: str
              sample: "10de:1839"
            class:
              description: The 24-bit PCI class code.
              returned: always
              type: str
              sample: "0x040300"
            type:
              description: What the function is, from its class.
              returned: always
              type: str
              sample: audio
              choices: [gpu, audio, usb, serial_bus, nvswitch, bridge, other]
            bound_driver:
              description: The kernel driver bound to the function. Null when none is bound.
              returned: always
              type: str
              sample: snd_hda_intel
            iommu_group:
              description: The IOMMU group. Null without an IOMMU.
              returned: always
              type: int
              sample: 23
            numa_node:
              description: The NUMA node. Null when the platform does not say.
              returned: always
              type: int
              sample: 0
        nvswitch_count:
          description: The number of NVSwitch PCI functions.
          returned: always
          type: int
          sample: 4
        iommu:
          description:
            - The host's IOMMU as sysfs shows it, and every IOMMU group that holds an NVIDIA function, with all its
              members of any vendor. The P(gpuhost.nvidia.vfio_passthrough#role) role checks that a GPU's group can
              go to vfio-pci as a whole.
          returned: always
          type: dict
          contains:
            enabled:
              description: Whether the kernel created IOMMU groups (the IOMMU is on).
              returned: always
              type: bool
              sample: true
            groups:
              description: The IOMMU groups that hold an NVIDIA function, by group number.
              returned: always
              type: list
              elements: dict
              contains:
                group:
                  description: The IOMMU group number.
                  returned: always
                  type: int
                  sample: 14
                functions:
                  description:
                    - Every PCI function in the group, of any vendor, with the keys C(pci_bus_id), C(pci_device_id)
                      (vendor:device), C(class), C(type) (V(gpu), V(audio), V(usb), V(serial_bus), V(nvswitch),
                      V(bridge), V(other)), C(bound_driver) and C(boot_vga) (true, false or null).
                  returned: always
                  type: list
                  elements: dict
                  sample:
                    - {pci_bus_id: "0000:01:00.0", pci_device_id: "10de:2204", class: "0x030000", type: gpu,
                       bound_driver: nvidia, boot_vga: false}
        display_functions:
          description:
            - Every display-class PCI function of any vendor (on-board BMC graphics too), with the keys C(pci_bus_id),
              C(pci_device_id), C(class), C(type), C(bound_driver) and C(boot_vga). C(boot_vga) true marks the device
              the firmware initialised for the console; null when sysfs has no C(boot_vga) file.
          returned: always
          type: list
          elements: dict
          sample:
            - {pci_bus_id: "0000:03:00.0", pci_device_id: "1a03:2000", class: "0x030000", type: gpu,
               bound_driver: ast, boot_vga: true}
        device_nodes:
          description: The C(/dev/nvidia*) and C(/dev/nvidia-caps/*) device nodes that exist.
          returned: always
          type: list
          elements: str
          sample: [/dev/nvidia0, /dev/nvidia-uvm, /dev/nvidiactl]
        kernels:
          description:
            - The installed kernels (a C(/lib/modules/<release>) with the kernel's own modules, or a
              C(/boot/vmlinuz-<release>)), which of them have an nvidia module (C(nvidia.ko*) under C(updates/dkms),
              C(updates), C(extra), C(kernel/drivers/video) and the other module search directories), and the kernel the
              host boots next. Read under O(root).
          returned: always
          type: dict
          contains:
            running:
              description: The running kernel's release.
              returned: always
              type: str
              sample: 6.1.0-26-amd64
            boot:
              description: The kernel the host boots next, the newest installed one. Null when none was found.
              returned: always
              type: str
              sample: 6.1.0-28-amd64
            boot_source:
              description: How RV(ansible_facts.nvidia_gpu.kernels.boot) was chosen (V(newest installed)); null without kernels.
              returned: always
              type: str
              sample: newest installed
            installed:
              description: Every installed kernel, oldest first, with C(release), C(nvidia_module) (bool) and C(module_files).
              returned: always
              type: list
              elements: dict
              sample:
                - {release: 6.1.0-26-amd64, nvidia_module: true, module_files: [/lib/modules/6.1.0-26-amd64/updates/dkms/nvidia-current.ko.xz]}
                - {release: 6.1.0-28-amd64, nvidia_module: false, module_files: []}
            without_module:
              description: The installed kernels that have no nvidia module.
              returned: always
              type: list
              elements: str
              sample: [6.1.0-28-amd64]
            dkms:
              description:
                - The nvidia modules registered with DKMS, read from its tree (C(/var/lib/dkms) under O(root)) as C(dkms status)
                  reads it - each with C(module), C(version), C(built) (the kernels it is built for) and C(installed) (the
                  kernels it is installed into). A version built for no kernel is only added (no headers yet). Empty without DKMS.
              returned: always
              type: list
              elements: dict
              sample:
                - {module: nvidia-current, version: 535.261.03, built: [6.1.0-26-amd64, 6.1.0-28-amd64], installed: [6.1.0-26-amd64]}
        reboot_required:
          description:
            - Whether a change is waiting for a GPU reset or a reboot. See RV(ansible_facts.nvidia_gpu.reboot_reasons).
          returned: always
          type: bool
          sample: false
        reboot_reasons:
          description: Why a reset or reboot is required, one sentence per reason.
          returned: always
          type: list
          elements: str
          sample: []
"""

import math

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.gpuhost.nvidia.plugins.module_utils import _facts, _nvml

# A day: a longer bound is a typo, and a task that waits that long is hung in all but name.
_MAX_TIMEOUT = 86400


def main() -> None:
    module = AnsibleModule(
        argument_spec=dict(
            backends=dict(type="list", elements="str", choices=list(_facts.BACKENDS), default=list(_facts.BACKENDS)),
            gather=dict(type="list", elements="str", choices=list(_facts.GATHER), default=[]),
            root=dict(type="path", default="/", aliases=["sysfs_root"]),
            nvml_timeout=dict(type="float", default=_nvml.DEFAULT_TIMEOUT),
        ),
        supports_check_mode=True,
    )
    # The root is checked before anything is read under it: a root that is not a directory would report no_gpu.
    errors = _facts.root_errors(module.params["root"])
    timeout = module.params["nvml_timeout"]
    if not math.isfinite(timeout) or timeout < 0 or timeout > _MAX_TIMEOUT:
        errors.append("nvml_timeout %r is not a number of seconds from 0 to %d; give for example 10, or 0 for no bound"
                      % (timeout, _MAX_TIMEOUT))
    if errors:
        module.fail_json(msg="; ".join(errors) + "; the GPU facts were not gathered", errors=errors, messages=errors)
    facts = _facts.gather_on_host(module, module.params["backends"], module.params["gather"], module.params["root"],
                                  nvml_timeout=timeout or None)
    module.exit_json(changed=False, ansible_facts={"nvidia_gpu": facts})


if __name__ == "__main__":
    main()
