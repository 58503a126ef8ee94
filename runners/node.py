"""`python -m runners.node --address HEAD:6379`: join this machine to a tierbench Ray cluster, its tier declared.

The tier comes from the GPU (NVML's name and memory against each tier's `gpu_names` and `gpu_memory_gib` in
conf/gpu/*.yaml) or from `--tier`
(a GPU tier only on a node with its GPU, or with `--emulated`); `--client-pool` makes the node a load generator for
`clients.placement=separate`; `--head` starts the cluster's head instead of joining one. It checks the node with
`runners.doctor` (`--skip-doctor` joins without), then runs `ray start` with the tier as the custom resource
`tier_<name>` (what the sweep places by) and the label `gpu-tier=<name>` (for your own `label_selector`s).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import socket
import subprocess
import sys

from experiments.cluster.tiers import TIER_LABEL, known_tiers, node_declaration, tier_gpu_problem, tiers_for_gpu
from serving.node import MigState
from serving.registry import ray_node_environment

# Fixed ports, so a firewall can open exactly these between the nodes (Ray picks random ones otherwise):
# the head's GCS port (--port) plus, on every node, these and the worker port range.
NODE_PORTS = {"node-manager-port": 6380, "object-manager-port": 6381, "runtime-env-agent-port": 6382,
              "dashboard-agent-grpc-port": 6383, "dashboard-agent-listen-port": 6384, "metrics-export-port": 6385,
              "min-worker-port": 10002, "max-worker-port": 10999}


class NodeSetupError(RuntimeError):
    """What is wrong with this node's declaration, and how to fix it."""


def detect_tier(gpu_names: tuple[str, ...] | list[str], memory_mib: tuple[int | None, ...] = (),
                mig: MigState | None = None) -> str:
    """The one tier this node's GPUs are (their NVML names and memory against each tier's identity; on a card in MIG
    mode, the MIG slices this node's processes see against each slice tier's)."""
    known = sorted(known_tiers())
    if not gpu_names:
        raise NodeSetupError(f"no NVIDIA GPU found (NVML lists none): pass --tier (one of {known}), or "
                             "--client-pool for a load-generator node")
    matched = tiers_for_gpu(gpu_names, memory_mib, mig=mig)
    slices = mig.seen if mig is not None else ()
    if not matched and mig is not None and any(mig.enabled):
        what = f"its MIG slices {[d.name for d in slices]} are" if slices else "it has no MIG slice, so it is"
        raise NodeSetupError(f"GPU {list(gpu_names)} is in MIG mode and {what} no tier's in conf/gpu/ (a node on a "
                             "card in MIG mode is the tier of its slice: gpu_names, mig_profile): create a slice a "
                             "tier names (`python -m runners.doctor --tier <tier>` says how), add a slice tier "
                             "(docs/gpu-nodes.md#mig-slices), or pass --tier to declare one with --emulated")
    if not matched:
        raise NodeSetupError(f"GPU {list(gpu_names)} is no tier's GPU in conf/gpu/ (their gpu_names): pass --tier "
                             f"(one of {known}) to declare it anyway with --emulated, or add its NVML name to a tier's "
                             "gpu_names, or a conf/gpu/<tier>.yaml with its price")
    if len(matched) > 1:
        pin = (" (a card in MIG mode: start the node with CUDA_VISIBLE_DEVICES=MIG-<uuid> of one slice, from "
               "`nvidia-smi -L`, and it is that slice's tier)" if slices else "")
        raise NodeSetupError(f"GPU {list(gpu_names)} matches tiers {matched}: pass --tier to choose one{pin}")
    return matched[0]


def resolve_tier(args: argparse.Namespace) -> str | None:
    """The tier this node declares; refused when it is a GPU tier and the node lacks its GPU (unless emulated)."""
    from serving.node import nvml_gpus

    if not args.tier:
        if args.head or args.client_pool:
            return None  # a CPU head or a load generator need no tier; pass --tier to make them one too
        gpus = nvml_gpus()
        return detect_tier(gpus.names, gpus.memory_mib, gpus.mig)
    tiers = known_tiers()
    if args.tier not in tiers:
        raise NodeSetupError(f"--tier {args.tier}: unknown tier; choose from {sorted(tiers)} (conf/gpu/*.yaml)")
    gpus = nvml_gpus()
    problem = None if args.emulated else tier_gpu_problem(tiers[args.tier], gpus.names, gpus.memory_mib,
                                                              cpu_count=os.cpu_count(), mig=gpus.mig)
    if problem:
        raise NodeSetupError(f"--tier {args.tier}: {problem}{f' ({gpus.problem})' if gpus.problem else ''}: its "
                             "figures would be filed under a GPU it does not have. Join with the tier its GPU matches "
                             "(leave out --tier), as a --client-pool, or with --emulated to stand in for the tier on "
                             "purpose (every result tagged emulated=true)")
    return args.tier


def is_this_host(address: str) -> bool:
    """Whether HOST:PORT names this machine (an address one of its interfaces holds)."""
    host = address.rpartition(":")[0].strip("[]") or address
    try:
        ip = socket.gethostbyname(host)
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.bind((ip, 0))  # only an address of this machine can be bound
        return True
    except OSError:
        return False


def ray_start_command(args: argparse.Namespace, tier: str | None) -> list[str]:
    """The `ray start` command line declaring this node's tier and roles."""
    cmd = ["ray", "start", "--disable-usage-stats"]
    if args.head:
        # The dashboard answers on loopback only: reach it through an SSH tunnel.
        cmd += ["--head", f"--port={args.port}", "--dashboard-host=127.0.0.1"]
    else:
        cmd += [f"--address={args.address}"]
        if is_this_host(args.address):
            # Nodes on one machine share the session's log folder, and each node's log monitor would stream every
            # line of it to the sweep's console: one copy per node. The head's monitor streams them all once.
            cmd += ["--include-log-monitor=false"]
    resources = node_declaration([tier] if tier else [], client_pool=args.client_pool, emulated=args.emulated)
    if resources:
        cmd += [f"--resources={json.dumps(resources, separators=(',', ':'))}"]
    if tier:
        cmd += [f"--labels={TIER_LABEL}={tier}"]
    if args.num_cpus is not None:
        cmd += [f"--num-cpus={args.num_cpus}"]
    if args.object_store_memory is not None:
        cmd += [f"--object-store-memory={args.object_store_memory}"]
    if not args.random_ports:
        cmd += [f"--{flag}={port}" for flag, port in NODE_PORTS.items()]
    if args.node_ip_address:
        cmd += [f"--node-ip-address={args.node_ip_address}"]
    if args.block:
        cmd += ["--block"]
    return cmd


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m runners.node", description=__doc__.split("\n\n")[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--address", help="the head's HOST:PORT to join (e.g. 10.0.0.5:6379)")
    where.add_argument("--head", action="store_true", help="start the cluster's head node here")
    parser.add_argument("--port", type=int, default=6379, help="with --head: the GCS port (default 6379)")
    parser.add_argument("--tier", help="declare this tier instead of detecting it from the GPU")
    parser.add_argument("--client-pool", action="store_true",
                        help="a load-generator node for clients.placement=separate")
    parser.add_argument("--num-cpus", type=int, help="CPUs Ray may schedule here (default: all)")
    parser.add_argument("--object-store-memory", type=int, help="bytes of Ray's object store (default: Ray's)")
    parser.add_argument("--node-ip-address", help="the address other nodes reach this one at (VPN / overlay IP)")
    parser.add_argument("--random-ports", action="store_true",
                        help="let Ray pick its ports (default: fixed ones, see NODE_PORTS, to open in firewalls)")
    parser.add_argument("--block", action="store_true", help="stay in the foreground (container entry points)")
    parser.add_argument("--emulated", action="store_true",
                        help="stand in for --tier on a machine without its GPU (tests, demos): results are tagged "
                             "emulated=true")
    parser.add_argument("--skip-doctor", action="store_true",
                        help="don't check the node first (python -m runners.doctor) before `ray start`")
    parser.add_argument("--dry-run", action="store_true",
                        help="check the node and print the `ray start` command; start nothing")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        tier = resolve_tier(args)
    except NodeSetupError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not args.skip_doctor:
        from runners.doctor import NOT_OK_DOCS, check

        ok, table = check(tier, args.emulated, gpu_tier_default=False)
        print(table, flush=True)
        if not ok:
            print(f"error: this node cannot serve tier {tier} (above); fix it, or pass --skip-doctor to join anyway "
                  f"({NOT_OK_DOCS})", file=sys.stderr)
            return 2
    cmd = ray_start_command(args, tier)
    role = ", ".join(filter(None, [f"tier {tier}" if tier else "", "client pool" if args.client_pool else "",
                                   "head" if args.head else ""])) or "plain node"
    print(f"{role}: {shlex.join(cmd)}", flush=True)
    if args.dry_run:
        return 0
    if not shutil.which("ray"):
        print("error: `ray` is not on PATH: install tierbench on this node (docs/gpu-nodes.md#setting-up-a-node)",
              file=sys.stderr)
        return 2
    # What the backend packages ask of a Ray node's environment (e.g. Ray Serve's per-request logs kept in its log
    # files rather than streamed to the sweep's console), a setting of this shell's winning.
    env = {**ray_node_environment(), **os.environ}
    code = subprocess.run(cmd, env=env).returncode
    if code != 0:
        print(f"error: `ray start` exited {code} (its reason above); a Ray already running here is the usual one "
              "(docs/troubleshooting.md#ray-already-running)", file=sys.stderr)
    if code == 0 and args.head:
        print(f"head up. Join GPU boxes with: python -m runners.node --address <this host's IP>:{args.port}\n"
              "Run sweeps here with: python -m runners.sweep cluster=address gpu=a100,rtx4090 -m")
    return code


if __name__ == "__main__":
    sys.exit(main())
