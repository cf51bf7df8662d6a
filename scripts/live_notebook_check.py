"""Live check of the notebooks' widgets in JupyterLab, driven through headless Chromium.

For each notebook named: open it in JupyterLab (a copy, so nothing is saved over the committed
one) at a 1600 x 1000 window, run all cells, take a screenshot of every widget, move its first
slider one step, reload the page while the kernel still runs, and check what a reader would see:

* every plotly figure of a widget comes back drawn (traces in ``gd.data``, not an empty grid),
  before and after a second move;
* a figure that followed the slider before the reload follows it after (a widget whose model the
  reloaded page failed to start keeps drawing the old iteration: anywidget drops its messages);
* no browser console error (``Error setting state: indices must be valid indices for gd.data``
  was the symptom of a FigureWidget whose saved state lagged behind its figure);
* no control's description is cut (``temperat…``) or wrapped onto a second line;
* no widget's figure is wider than the output area it sits in (a clipped legend).

It needs a JupyterLab with the ipywidgets and anywidget front ends, a kernel that imports this
project, playwright (``pip install playwright``; no browser download: it drives the system
Chromium) and Chromium. It uses the CPU for the notebooks' cells, so run it under the CPU lock
where others measure. Usage::

    python scripts/live_notebook_check.py --lab-python LAB_VENV/bin/python --kernel-python \\
        .venv/bin/python --out /tmp/live notebooks/01_quickstart.ipynb notebooks/03_parameter_explorer.ipynb

A slow machine on purpose: ``--slow-browser 6`` throttles the reloaded page's CPU 6x (Chromium's own
throttling), ``--slow-kernel S`` makes the kernel wait S s before answering the page's request for the
widgets' states. The kernel's answers (seconds, widgets, MB of widget modules) are printed as INFO lines.

It prints one line per finding and ``OK`` lines for the checks that hold; the exit status is the
number of findings. Screenshots go to ``--out``. notebooks/README.md ("Live check in JupyterLab") describes
the check and its last run.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: JS: per plotly graph inside a widget output, how many traces it draws, its size, and a hash of what it
#: draws (points, texts, shapes, annotations, title), so a figure that no longer follows the controls shows
_GRAPHS_JS = """() => {
const sig = g => { const l = g.layout || {};
  const s = JSON.stringify([(g.data || []).map(t => [t.x, t.y, t.z, t.text]), l.shapes,
                            (l.annotations || []).map(a => a.text), (l.title || {}).text]) || '';
  let h = 0; for (let i = 0; i < s.length; i++) h = (h * 31 + s.charCodeAt(i)) | 0; return h; };
return [...document.querySelectorAll('.jp-OutputArea-output .js-plotly-plot')].map(g => {
  const r = g.getBoundingClientRect();
  const area = g.closest('.jp-OutputArea-output').getBoundingClientRect();
  return {traces: (g.data || []).length, notes: ((g.layout || {}).annotations || []).filter(a => a.text).length, points: (g.data || []).reduce((n, t) => n + ((t.x || []).length), 0),
          width: r.width, height: r.height, area_right: area.right, right: r.right,
          title: ((g.layout || {}).title || {}).text || '', sig: sig(g)};
});}"""

#: JS: every widget control's description label that is cut (ellipsis) or wraps
_LABELS_JS = """() => [...document.querySelectorAll('.widget-label, .widget-label-basic, .widget-toggle-button, .widget-button')]
  .filter(e => e.offsetParent !== null && e.textContent.trim()).map(e => {
    const cs = getComputedStyle(e); const lh = parseFloat(cs.lineHeight) || parseFloat(cs.fontSize) * 1.3;
    return {text: e.textContent.trim(), cut: e.scrollWidth > e.clientWidth + 1,
            lines: Math.round(e.getBoundingClientRect().height / lh)};
  }).filter(l => l.cut || l.lines > 1)"""

#: JS: a cell still running ([*]), or the kernel busy without one (a widget's comm message, e.g. a slider
#: move, runs no cell: on a slow machine the redraw it starts outlasts a fixed pause, and a save and reload
#: taken then finds the kernel still busy restoring nothing)
_BUSY_JS = """() => [...document.querySelectorAll('.jp-InputArea-prompt')].some(p => p.textContent.includes('*'))
  || [...document.querySelectorAll('[data-status]')].some(e => e.getAttribute('data-status') === 'busy')
  || [...document.querySelectorAll('.jp-StatusBar-TextItem')].some(e => /\\bBusy\\b/.test(e.textContent))"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


#: IPython startup code for the kernel: log how long each answer to the front end's ``request_states``
#: (the reload's one message for every widget's state) takes and how many MB of widget modules it carries
#: (plotly's bundle, about 5 MB per figure), after ``DYNATREE_SLOW_S``
#: seconds of sleep (a kernel slow to answer, as on a loaded laptop; 0 by default)
_KERNEL_STARTUP = """
import json, os, sys, time
from ipywidgets.widgets.widget import Widget, _instances
_slow_s = float(os.environ.get("DYNATREE_SLOW_S", "0"))
_answer = Widget._handle_control_comm_msg.__func__

def _timed(cls, msg):
    start = time.perf_counter()
    time.sleep(_slow_s)
    _answer(cls, msg)
    esm = sum(len(getattr(w, k, "") or "") for w in list(_instances.values()) for k in ("_esm", "_plotly_esm"))
    print(json.dumps({"request_states_s": round(time.perf_counter() - start, 2), "widgets": len(_instances),
                      "esm_mb": round(esm / 1e6, 1)}), file=open(os.environ["DYNATREE_LIVE_LOG"], "a"))

Widget._handle_control_comm_msg = classmethod(_timed)
"""


def _kernelspec(root: Path, python: str, slow_s: float) -> Path:
    """A ``python3`` kernelspec running ``python`` (the project's interpreter), first on JUPYTER_PATH, its
    IPython profile logging (and, with ``slow_s``, delaying) the answers to a reloaded page's state request."""
    spec = root / "jpath" / "kernels" / "python3"
    spec.mkdir(parents=True, exist_ok=True)
    startup = root / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True, exist_ok=True)
    (startup / "00-live-check.py").write_text(_KERNEL_STARTUP)
    (spec / "kernel.json").write_text(json.dumps({
        "argv": [python, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
        "display_name": "Python 3 (ipykernel)", "language": "python",
        "env": {"IPYTHONDIR": str(root / "ipython"), "DYNATREE_SLOW_S": str(slow_s),
                "DYNATREE_LIVE_LOG": str(root / "kernel_log.jsonl")}}))
    return root / "jpath"


def _start_lab(lab_python: str, kernel_python: str, notebooks: list[Path], work: Path,
               slow_s: float = 0.0) -> tuple[subprocess.Popen, str]:
    for nb in notebooks:
        shutil.copy(nb, work / nb.name)
    env = dict(os.environ, JUPYTER_PATH=str(_kernelspec(work, kernel_python, slow_s)),
               HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    settings = work / "settings"  # every cell in the DOM (no windowing: a reloaded page draws what is
    settings.mkdir(exist_ok=True)  # off screen too), and no news pop-up over the widgets
    (settings / "overrides.json").write_text(json.dumps({
        "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
        "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False}}))
    port = _free_port()
    proc = subprocess.Popen(
        [lab_python, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--IdentityProvider.token=live",
         f"--ServerApp.root_dir={work}", "--ServerApp.disable_check_xsrf=True",
         f"--LabApp.app_settings_dir={settings}", "--LabServerApp.extension_manager=readonly", "--allow-root"],
        cwd=work, env=env, stdout=open(work / "lab.log", "w"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    for _ in range(120):
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return proc, url
        except OSError:
            time.sleep(0.5)
    proc.terminate()
    raise RuntimeError(f"JupyterLab did not start; see {work / 'lab.log'}")


def _wait_idle(page, budget_s: float) -> None:
    """Until no cell shows [*] (and the kernel indicator is idle) for two seconds."""
    end, calm = time.time() + budget_s, 0
    while time.time() < end:
        busy = page.evaluate(_BUSY_JS)
        calm = 0 if busy else calm + 1
        if calm >= 4:
            return
        time.sleep(0.5)
    raise TimeoutError("the notebook did not finish running")


def _wait_restored(page, traces: list[int], budget_s: float, least_s: float = 12.0) -> float:
    """Seconds until the page draws as many traces per figure as ``traces`` (at least ``least_s``, the old
    fixed pause), or ``budget_s`` when it never does (the findings then name the difference)."""
    start = time.time()
    while time.time() - start < budget_s:
        if time.time() - start >= least_s and [g["traces"] for g in page.evaluate(_GRAPHS_JS)] == traces:
            break
        time.sleep(1)
    return time.time() - start


def _wait_notebook(page) -> None:
    """Until a notebook is shown (a restored workspace may hold a hidden one as well)."""
    page.wait_for_function("() => [...document.querySelectorAll('.jp-Notebook')].some(e => e.offsetParent !== null)",
                           timeout=120_000)


def _answer_dialogs(page, out: Path, stem: str) -> None:
    """Accept a dialog JupyterLab opens over a fresh page (e.g. the kernel chooser when the
    notebook's kernel is still starting), saying which: it would swallow the clicks below."""
    for k in range(3):
        dialog = page.locator(".jp-Dialog")
        if dialog.count() == 0:
            return
        page.screenshot(path=str(out / f"{stem}_dialog{k}.png"))
        print(f"INFO {stem}: dialog answered: {' '.join(dialog.first.inner_text().split())[:160]!r}")
        dialog.locator(".jp-Dialog-button.jp-mod-accept").first.click()
        time.sleep(2)


def _run_all(page) -> None:
    page.get_by_role("menuitem", name="Run", exact=True).click()
    page.get_by_role("menuitem", name="Run All Cells", exact=True).click()


def _graphs_drawn(page, label: str, findings: list[str]) -> list[dict]:
    graphs = page.evaluate(_GRAPHS_JS)
    # a figure of words alone (the why panel where the draft never ran) has no trace but is drawn
    empty = [g for g in graphs if g["traces"] == 0 and g["notes"] == 0]
    for g in empty:
        findings.append(f"{label}: a figure is drawn empty ({g['title'][:60]!r})")
    for g in graphs:
        if g["right"] > g["area_right"] + 2:
            findings.append(f"{label}: a figure ({g['title'][:50]!r}) is {g['right'] - g['area_right']:.0f} px "
                            "wider than its output area (clipped)")
    return graphs


def _move_slider(page) -> bool:
    """One step right on the first slider of the widgets (keyboard, as a user would)."""
    handle = page.locator(".widget-slider .noUi-handle, .widget-hslider .noUi-handle").first
    if handle.count() == 0:
        return False
    handle.scroll_into_view_if_needed()
    handle.focus()
    page.keyboard.press("ArrowRight")
    return True


def check(nb: str, url: str, out: Path, browser, budget_s: float, slow_browser: float = 1.0) -> list[str]:
    findings: list[str] = []
    # 1600 px wide (the width the clipping is judged at); tall, so a widget fits one screenshot
    page = browser.new_page(viewport={"width": 1600, "height": 2400})
    console: list[str] = []
    page.on("console", lambda m: console.append(m.text) if m.type == "error" else None)
    page.on("pageerror", lambda e: console.append(str(e)))
    stem = Path(nb).stem
    # ?reset: a workspace with this notebook alone (the page queries below read the whole page)
    page.goto(f"{url}/lab/tree/{nb}?reset&token=live", wait_until="domcontentloaded")
    _wait_notebook(page)
    time.sleep(3)
    _answer_dialogs(page, out, stem)
    _run_all(page)
    time.sleep(2)
    _wait_idle(page, budget_s)
    time.sleep(4)  # the widgets' figures draw after the kernel is idle
    ran = _screens(page, out / f"{stem}_1_run", findings, "after run all")
    moved = _move_slider(page)
    time.sleep(4)
    _wait_idle(page, budget_s)
    _screens(page, out / f"{stem}_2_moved", findings, "after a move")
    before = page.evaluate(_GRAPHS_JS)
    page.keyboard.press("Control+s")  # what autosave does: the page reloads the notebook from disk
    time.sleep(3)
    if slow_browser > 1:  # the reloaded page on a slow machine: Chromium's CPU throttled (it holds across a reload)
        page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": slow_browser})
    page.reload(wait_until="domcontentloaded")
    _wait_notebook(page)
    # the widget manager fetches every model's state from the running kernel: wait until the figures are back
    # (as many traces as before), not a fixed pause, and say how long the restore took
    waited = _wait_restored(page, [g["traces"] for g in before], budget_s)
    print(f"INFO {stem}: after reload the figures were back after {waited:.0f} s")
    after = _screens(page, out / f"{stem}_3_reloaded", findings, "after reload")
    if [g["traces"] for g in after] != [g["traces"] for g in before]:
        findings.append(f"after reload: traces per figure {[g['traces'] for g in after]} "
                        f"!= before {[g['traces'] for g in before]}")
    if _move_slider(page):
        time.sleep(4)
        _wait_idle(page, budget_s)
        time.sleep(4)  # the throttled page draws after the kernel is idle
    moved_again = _screens(page, out / f"{stem}_4_moved_after_reload", findings, "after reload and a move")
    findings += _stuck(ran, before, after, moved_again, _kernel_view(page, moved_again, budget_s))
    for label in page.evaluate(_LABELS_JS):
        findings.append(f"control label {label['text']!r} " + ("cut" if label["cut"] else f"on {label['lines']} lines"))
    errors = [c for c in console if "favicon" not in c and "404" not in c]
    findings += [f"console error: {c[:200]}" for c in errors]
    print(f"{nb}: traces per figure after run all {[g['traces'] for g in ran]}, slider moved: {moved}, "
          f"after reload {[g['traces'] for g in after]}, console errors: {len(errors)}")
    page.close()
    return findings


def _kernel_view(page, shown: list[dict], budget_s: float) -> list[dict]:
    """The figures as the kernel holds them now: the page reloaded once more (unthrottled), each view built
    afresh from its model's state. A step of a slider may leave a figure as it was (03's explorer at some
    τ_h), so only this tells a figure that missed a move from one that had nothing to change."""
    page.context.new_cdp_session(page).send("Emulation.setCPUThrottlingRate", {"rate": 1})
    page.reload(wait_until="domcontentloaded")
    _wait_notebook(page)
    _wait_restored(page, [g["traces"] for g in shown], budget_s)
    return page.evaluate(_GRAPHS_JS)


def _stuck(ran: list[dict], moved: list[dict], reloaded: list[dict], moved_again: list[dict],
           kernel: list[dict]) -> list[str]:
    """Figures that followed the slider's move before the reload but not after it, while the kernel's state
    moved on (a widget whose model the reloaded page failed to start: anywidget drops every later message to
    it, the figure stays as it was)."""
    if not (len(ran) == len(moved) == len(reloaded) == len(moved_again) == len(kernel)):
        return []  # a figure missing is reported by the trace counts
    return [f"after reload and a move: figure {k} ({moved[k]['title'][:50]!r}) did not follow the slider "
            "(it did before the reload, and the kernel's state moved on)" for k in range(len(ran))
            if ran[k]["sig"] != moved[k]["sig"] and reloaded[k]["sig"] == moved_again[k]["sig"]
            and kernel[k]["sig"] != moved_again[k]["sig"]]


def _screens(page, prefix: Path, findings: list[str], label: str) -> list[dict]:
    """A screenshot of each widget (ipywidgets box holding a plotly graph) and of the whole page."""
    graphs = _graphs_drawn(page, label, findings)
    boxes = page.locator(".jp-OutputArea-output .widget-vbox:not(.widget-vbox .widget-vbox)")
    for k in range(boxes.count()):
        box = boxes.nth(k)
        box.scroll_into_view_if_needed()
        time.sleep(0.5)
        box.screenshot(path=f"{prefix}_widget{k}.png")
    page.screenshot(path=f"{prefix}_page.png")
    return graphs


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("notebooks", nargs="+", type=Path)
    ap.add_argument("--lab-python", required=True, help="a python with jupyterlab, jupyterlab_widgets, anywidget")
    ap.add_argument("--kernel-python", default=sys.executable, help="a python that imports this project")
    ap.add_argument("--chromium", default=shutil.which("chromium") or "/usr/bin/chromium")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--budget", type=float, default=600, help="seconds a notebook may run")
    ap.add_argument("--slow-kernel", type=float, default=0.0, metavar="S",
                    help="the kernel sleeps S seconds before answering a reloaded page's request for the widgets' "
                         "states (a slow machine on purpose)")
    ap.add_argument("--slow-browser", type=float, default=1.0, metavar="RATE",
                    help="throttle the reloaded page's CPU RATE times (Chromium's CPU throttling), as on a slow laptop")
    a = ap.parse_args()
    from playwright.sync_api import sync_playwright
    a.out.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="live-lab-"))
    proc, url = _start_lab(a.lab_python, str(Path(a.kernel_python).absolute()),  # the lab runs elsewhere
                            [p.resolve() for p in a.notebooks], work, a.slow_kernel)
    findings: list[str] = []
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=a.chromium, args=["--no-sandbox"])
            for nb in a.notebooks:
                found = check(nb.name, url, a.out, browser, a.budget, a.slow_browser)
                findings += [f"{nb.name}: {f}" for f in found]
            browser.close()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    log = work / "kernel_log.jsonl"
    for line in (log.read_text().splitlines() if log.exists() else []):
        print("INFO kernel answered request_states:", line)
    for f in findings:
        print("FINDING", f)
    print(f"{len(findings)} finding(s); screenshots in {a.out}")
    return len(findings)


if __name__ == "__main__":
    sys.exit(main())
