"""Shards on a Ray cluster: one actor per worker, each loading the pair once (``--ray``).

:class:`RayBackend` connects to the cluster at an address (or starts a local Ray instance),
checks that it has the GPUs a task asks for, and starts actors that each hold one
:class:`~.execution.ShardWorker`. Shards go to idle actors; a shard whose actor died (killed,
out of memory, its node lost) comes back as :class:`~.execution.WorkerLost`, the actor is
replaced, and :func:`~.execution.execute` retries the shard. Ray is an optional extra
(``pip install 'dynatree[ray]'``): nothing here imports it until a backend is made.
"""

from __future__ import annotations

import os
import socket
from typing import Any
from urllib.parse import urlsplit

from dynatree_core.bench.execution import ShardResult, ShardTask, WorkerLost
from dynatree_core.bench.pairs import PairInfo, PairSpec
from dynatree_core.bench.shards import Shard

LOCAL = "local"


class RayUnavailable(RuntimeError):
    """Ray is not installed, the cluster cannot be reached, or it lacks what a task asks for."""


def import_ray() -> Any:
    try:
        import ray
    except ImportError:
        raise RayUnavailable("--ray needs Ray, which is not installed here: pip install 'dynatree[ray]'") from None
    return ray


def check_address(address: str | None) -> None:
    """Fail in seconds on an address that is malformed or that nothing answers on (Ray itself
    would retry for minutes). ``None``/``local``: a local instance; ``auto``: Ray's own lookup."""
    if address in (None, LOCAL, "auto"):
        return
    parts = urlsplit(address if "://" in address else f"ray://{address}")
    try:
        host, port = parts.hostname, parts.port
    except ValueError:  # a port that is not a number
        host = port = None
    if parts.scheme not in ("ray", "http", "https") or not host or port is None:
        raise RayUnavailable(f"--ray {address!r}: expected HOST:PORT, ray://HOST:PORT or auto "
                             f"(or no address for a local Ray instance)")
    try:
        with socket.create_connection((host, port), timeout=5):
            pass
    except OSError as e:
        raise RayUnavailable(f"--ray {address!r}: cannot reach a Ray cluster there ({e.strerror or e})") from None


class _Actor:
    """The body of a Ray actor: a ShardWorker on this node's share of the machine."""

    def __init__(self, spec: PairSpec, worker_id: str, threads: float, crash_once: tuple[str, str] | None):
        import torch

        torch.set_num_threads(max(1, int(threads)))  # the CPUs Ray gave this actor, not the whole node
        from dynatree_core.bench.execution import ShardWorker

        self.worker = ShardWorker(spec.load(), f"{worker_id}@{socket.gethostname()}")
        self._crash = crash_once

    def info(self) -> dict[str, Any]:
        return self.worker.info

    def pair_info(self) -> PairInfo:
        from dynatree_core.bench.pairs import pair_info

        return pair_info(self.worker.pair)

    def run(self, task: ShardTask) -> ShardResult:
        if self._crash is not None and task.shard.id == self._crash[0] and not os.path.exists(self._crash[1]):
            # fault injection (tests): this process dies mid-shard, once, as a killed worker would
            open(self._crash[1], "w").close()
            os._exit(1)
        return self.worker.run(task)


class RayBackend:
    """Ray actors as shard workers (see the module docstring).

    ``workers``: how many actors (default: as many as the cluster's GPUs, or CPUs, allow at
    ``gpus_per_task``/``cpus_per_task`` each). ``gpus_per_task`` None: 1 when the cluster has
    GPUs and ``spec.device`` is not ``cpu``, else 0. ``crash_once`` = (shard id, marker file):
    the actor that gets that shard exits once (tests of the retry path)."""

    name = "ray"

    def __init__(self, spec: PairSpec, address: str | None = None, *, workers: int | None = None,
                 gpus_per_task: float | None = None, cpus_per_task: float = 1,
                 crash_once: tuple[str, str] | None = None, init_kwargs: dict[str, Any] | None = None):
        self.ray = ray = import_ray()
        if workers is not None and workers < 1:
            raise ValueError(f"--ray-workers must be >= 1, got {workers}")
        if cpus_per_task <= 0:
            raise ValueError(f"--cpus-per-task must be > 0, got {cpus_per_task}")
        if gpus_per_task is not None and gpus_per_task < 0:
            raise ValueError(f"--gpus-per-task must be >= 0, got {gpus_per_task}")
        check_address(address)
        self.address = address or LOCAL
        self._owns = not ray.is_initialized()
        if self._owns:
            try:
                ray.init(address=None if self.address == LOCAL else address, include_dashboard=False,
                         log_to_driver=False, **(init_kwargs or {}))
            except Exception as e:  # ConnectionError, or a version mismatch with the cluster
                raise RayUnavailable(f"--ray {self.address!r}: cannot connect ({type(e).__name__}: {e})") from None
        try:
            res = ray.cluster_resources()
            gpus, cpus = float(res.get("GPU", 0)), float(res.get("CPU", 0))
            if gpus_per_task is None:
                gpus_per_task = 1.0 if gpus >= 1 and spec.device != "cpu" else 0.0
            if gpus_per_task > gpus:
                raise RayUnavailable(f"--gpus-per-task {gpus_per_task:g}: the Ray cluster at {self.address} has "
                                     f"{gpus:g} GPU(s)")
            if cpus_per_task > cpus:
                raise RayUnavailable(f"--cpus-per-task {cpus_per_task:g}: the Ray cluster at {self.address} has "
                                     f"{cpus:g} CPU(s)")
            fit = int(gpus // gpus_per_task) if gpus_per_task else int(cpus // cpus_per_task)
            self.target_workers = workers if workers is not None else max(1, fit)
            self.gpus_per_task, self.cpus_per_task = float(gpus_per_task), float(cpus_per_task)
            self._cls = ray.remote(num_cpus=cpus_per_task, num_gpus=gpus_per_task, max_restarts=0)(_Actor)
            self._spec, self._crash = spec, crash_once
            self._actors: dict[str, Any] = {}
            self._infos: dict[str, dict[str, Any]] = {}
            self._idle: list[str] = []
            self._inflight: dict[Any, tuple[Shard, str]] = {}
            self._made = 0
            first = self._start_actor()
            self.info: PairInfo = self._get(self._actors[first].pair_info.remote(), "loading the pair")
        except BaseException:
            self.close()
            raise

    # --- actors ----------------------------------------------------------------------------
    def _start_actor(self) -> str:
        return self._start_actors(1)[0]

    def _start_actors(self, n: int) -> list[str]:
        """Start ``n`` actors and wait until each has loaded its pair (they load in parallel)."""
        wids = [f"ray-w{self._made + i}" for i in range(n)]
        self._made += n
        for wid in wids:
            self._actors[wid] = self._cls.remote(self._spec, wid, self.cpus_per_task, self._crash)
        infos = self._get([self._actors[w].info.remote() for w in wids], f"starting {', '.join(wids)}")
        for wid, info in zip(wids, infos):
            self._infos[wid] = info
            self._idle.append(wid)
        return wids

    def _get(self, ref: Any, what: str) -> Any:
        try:
            return self.ray.get(ref)
        except self.ray.exceptions.RayError as e:
            raise RayUnavailable(f"Ray worker failed while {what}: {e}") from None

    def pair_info(self) -> PairInfo:
        return self.info

    def scale(self, shards: int) -> None:
        """Start the remaining actors, never more than there are shards to run."""
        missing = min(self.target_workers, max(1, shards)) - len(self._actors)
        if missing > 0:
            self._start_actors(missing)

    # --- Backend ---------------------------------------------------------------------------
    def capacity(self) -> int:
        return len(self._idle)

    def submit(self, shard: Shard, task: ShardTask) -> None:
        wid = self._idle.pop(0)
        self._inflight[self._actors[wid].run.remote(task)] = (shard, wid)

    def wait(self) -> tuple[Shard, ShardResult | WorkerLost]:
        ray = self.ray
        ready, _ = ray.wait(list(self._inflight), num_returns=1)
        ref = ready[0]
        shard, wid = self._inflight.pop(ref)
        try:
            result = ray.get(ref)
        except (ray.exceptions.RayActorError, ray.exceptions.WorkerCrashedError, ray.exceptions.NodeDiedError,
                ray.exceptions.ObjectLostError) as e:
            self._replace(wid)
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            return shard, WorkerLost(f"{wid} ({self._infos[wid]['host']}): {type(e).__name__}: {first}")
        self._idle.append(wid)
        return shard, result

    def _replace(self, wid: str) -> None:
        try:
            self.ray.kill(self._actors.pop(wid))
        except Exception:  # already gone
            pass
        self._start_actor()

    def workers(self) -> list[dict[str, Any]]:
        return list(self._infos.values())

    def describe(self) -> dict[str, Any]:
        return {"backend": self.name, "address": self.address, "ray_version": self.ray.__version__,
                "workers_requested": self.target_workers, "gpus_per_task": self.gpus_per_task,
                "cpus_per_task": self.cpus_per_task}

    def close(self) -> None:
        for a in getattr(self, "_actors", {}).values():
            try:
                self.ray.kill(a)
            except Exception:
                pass
        if getattr(self, "_owns", False) and self.ray.is_initialized():
            self.ray.shutdown()
