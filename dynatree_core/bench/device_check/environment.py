"""What the device check ran on: device, capability, library versions, the commit, TF32 settings."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
from typing import Any

from dynatree_core.paths import REPO_ROOT


def environment(device: str) -> dict[str, Any]:
    import platform
    from importlib import metadata

    import torch

    env: dict[str, Any] = {
        "date_utc": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "python": sys.version.split()[0], "platform": platform.platform(), "cpu_count": os.cpu_count(),
        "torch": torch.__version__, "torch_cuda": torch.version.cuda, "device": device,
        "torch_threads": torch.get_num_threads(),
    }
    for key, read in (("float32_matmul_precision", torch.get_float32_matmul_precision),  # fp32 = no TF32?
                      ("cuda_matmul_allow_tf32", lambda: torch.backends.cuda.matmul.allow_tf32),
                      ("cudnn_allow_tf32", lambda: torch.backends.cudnn.allow_tf32)):
        try:
            env[key] = read()
        except Exception as e:  # renamed or deprecated in some torch release
            env[key] = f"unavailable ({type(e).__name__})"
    for pkg in ("transformers", "tokenizers", "numpy", "hypothesis", "pytest", "pandas", "tqdm", "gguf",
                "accelerate"):
        try:
            env[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            env[pkg] = None
    try:
        env["git_commit"] = subprocess.run(["git", "rev-parse", "HEAD"], cwd=REPO_ROOT, capture_output=True, text=True,
                                           timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        env["git_commit"] = None
    # a device machine gets a copy of the tree without git: the staged plan names the commit it sent
    env["git_commit"] = env["git_commit"] or os.environ.get("DYNATREE_COMMIT") or None
    if device.startswith("cuda"):
        d = torch.device(device)
        props = torch.cuda.get_device_properties(d)
        env.update(device_name=props.name, cuda_capability=f"{props.major}.{props.minor}",
                   gpu_memory_gib=round(props.total_memory / 2 ** 30, 1), bf16_supported=torch.cuda.is_bf16_supported(),
                   cudnn=torch.backends.cudnn.version(), cuda_device_count=torch.cuda.device_count())
    else:
        env.update(device_name=platform.processor() or platform.machine(), cuda_capability=None)
    return env
