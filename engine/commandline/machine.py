"""`python -m engine devices` and `memory`: what this machine's runtimes give, and every
Tessera process with what it holds."""

from __future__ import annotations

import argparse
import json


def cmd_memory(args: argparse.Namespace) -> int:
    from engine.runtime import census

    now = census.take()
    if args.json:
        print(json.dumps(census.as_json(now), indent=2))
    else:
        print(census.report(now))
    return 0


def cmd_devices(args: argparse.Namespace) -> int:
    from engine.runtime.devices import probe

    reports = probe()
    if args.json:
        print(json.dumps([r.as_dict() for r in reports], indent=2))
        return 0
    for r in reports:
        state = "works" if r.ok else "unavailable"
        line = f"{r.runtime:<9} {r.device:<6} {state:<12} {r.provider or '-'}"
        if r.detail:
            line += f"  ({r.detail})"
        print(line)
        if r.cpu_kernel is not None:
            print(f"{'':<16} convolutions: {r.cpu_kernel}  ({r.cpu_kernel_note})")
    from engine.runtime.runtime_setup import gpu_lines

    print("\nGPUs:\n" + "\n".join(f"  {line}" for line in gpu_lines()))
    return 0
