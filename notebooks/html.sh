#!/usr/bin/env bash
# Offline HTML of the executed notebooks: nbconvert's lab page with the template option
# `--template offline` (notebooks/templates/offline), which drops the scripts the lab template
# loads from CDNs (require.js, MathJax, mermaid, the widget manager). Every figure is an inlined
# PNG and every widget an HTML snapshot, so the page needs no network and no kernel.
# Usage: bash notebooks/html.sh OUT_DIR [NAME.ipynb ...]   (default: every notebook)
set -euo pipefail
out="$(realpath -m "${1:?usage: bash notebooks/html.sh OUT_DIR [NAME.ipynb ...]}")"; shift
cd "$(dirname "$0")"
mkdir -p "$out"
if [ "$#" -eq 0 ]; then set -- 0*.ipynb; fi
jupyter nbconvert --to html --template offline --TemplateExporter.extra_template_basedirs=templates \
  --output-dir "$out" "$@"
