"""Where sessions are born and runs are made: providers, the CPU arena, sessions, devices, memory.

- `providers`: devices and runtimes → ONNX Runtime provider lists, library checks, shrink target;
- `arena`: the one CPU arena every session shares (M9, M11);
- `sessions`: the session cache (the only place an `InferenceSession` is created) and the
  handle of one loaded session, which runs it, releases and renews it, and counts;
- `devices`: what each runtime really gives on this machine (M7);
- `memory`: GPU memory through NVML and this process's RAM.
"""
