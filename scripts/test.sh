#!/usr/bin/env bash
# The project's test command (README): unit/property tests, then the notebooks under nbval.
set -euo pipefail
cd "$(dirname "$0")/.."
python -m pytest -q tests
if compgen -G "notebooks/*.ipynb" > /dev/null; then
  python -m pytest -q --nbval --nbval-current-env --nbval-sanitize-with notebooks/sanitize.cfg notebooks/
fi
