#!/usr/bin/env bash
# The project's test command (README): unit/property tests, then each notebook under nbval, named
# and timed as it runs. pytest exits 5 when it collects no test: `set -e` makes that fail too.
set -euo pipefail
cd "$(dirname "$0")/.."
# Two processes (pytest-xdist; DYNATREE_TEST_WORKERS to change): every test runs its torch on one thread
# (tests/conftest.py), so one process leaves CI's second core idle. Idle workers steal queued tests.
python -m pytest -q -n "${DYNATREE_TEST_WORKERS:-2}" --dist worksteal tests
shopt -s nullglob
notebooks=(notebooks/*.ipynb)
for nb in "${notebooks[@]}"; do
  echo "== notebook $nb"
  start=$(date +%s)
  python -m pytest -q --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg "$nb"
  echo "== notebook $nb: passed in $(( $(date +%s) - start )) s"
done
# Opt-in: the live check of 01 and 03 in JupyterLab and headless Chromium, the page reloaded while the kernel
# runs, on a browser throttled 6x (notebooks/README.md, "Live check in JupyterLab"). DYNATREE_LIVE_LAB names a
# python with jupyterlab, jupyterlab_widgets and anywidget. CI leaves it unset: its minutes do not fit CI's
# limit (the README gives the numbers); the exit status is the number of findings.
if [ -n "${DYNATREE_LIVE_LAB:-}" ]; then
  echo "== live check of 01 and 03 (JupyterLab: $DYNATREE_LIVE_LAB)"
  start=$(date +%s)
  python scripts/live_notebook_check.py --lab-python "$DYNATREE_LIVE_LAB" --slow-browser 6 \
    --out "$(mktemp -d -t live-check-XXXX)" notebooks/01_quickstart.ipynb notebooks/03_parameter_explorer.ipynb
  echo "== live check: passed in $(( $(date +%s) - start )) s"
fi
