#!/usr/bin/env bash
# The project's test command (README): unit/property tests, then each notebook under nbval, named
# and timed as it runs. pytest exits 5 when it collects no test: `set -e` makes that fail too.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q tests
shopt -s nullglob
notebooks=(notebooks/*.ipynb)
for nb in "${notebooks[@]}"; do
  echo "== notebook $nb"
  start=$(date +%s)
  python -m pytest -q --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg "$nb"
  echo "== notebook $nb: passed in $(( $(date +%s) - start )) s"
done
