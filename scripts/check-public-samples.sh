#!/usr/bin/env bash
# Fetch the public Durable Functions Python samples and run each one under devhost, unchanged, checking its
# results (docs/devhost-samples.md has the table). Needs network for the clones; NOT part of `make test`.
#
#   scripts/check-public-samples.sh [--apps DIR] [APP ...]
#
# Without --apps it clones (shallow, sparse) Azure/azure-functions-durable-python,
# Azure-Samples/Durable-Task-Scheduler and Azure/azure-functions-durable-extension into a temporary
# directory and copies each app there (nothing is copied into this repository). --apps DIR reuses a
# directory of app copies made before (same names). APP names limit the run to those apps.
# py2-fan_in_fan_out keeps blobs in AzureWebJobsStorage: it runs against Azurite's blob service (`make azurite`,
# or AZURITE_BLOB=<path to azurite-blob>), else it is reported SKIP. Samples that need a cloud service (Azure
# OpenAI, Document Intelligence) or Redis, and the v1 (function.json) samples, are listed in the doc only.
set -euo pipefail

repo_root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-"$repo_root/.venv/bin/python"}
[ -x "$python" ] || python=python3

apps=""
if [ "${1:-}" = "--apps" ]; then
    apps=$2
    shift 2
fi

if [ -z "$apps" ]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/devhost-public-samples.XXXXXX")
    trap 'rm -rf "$work"' EXIT
    apps=$work/apps
    mkdir -p "$apps"

    clone() {  # clone OWNER/NAME DEST PATH... : shallow sparse clone of the paths named
        local repo=$1 dest=$2
        shift 2
        git clone --quiet --depth 1 --filter=blob:none --sparse "https://github.com/$repo" "$dest"
        git -C "$dest" sparse-checkout set "$@"
        echo "$repo @ $(git -C "$dest" rev-parse HEAD)"
    }
    copy() {  # copy SRC-DIR NAME
        mkdir -p "$apps/$2"
        cp -a "$1/." "$apps/$2/"
    }

    py=$work/src/durable-python
    clone Azure/azure-functions-durable-python "$py" samples-v2 samples/serialize_arguments samples/fan_in_fan_out
    for d in blueprint function_chaining simple_sub_orchestration serialize_arguments orchestration_versioning \
        fan_in_fan_out; do
        copy "$py/samples-v2/$d" "py2-$d"
    done
    copy "$py/samples/fan_in_fan_out" v1-fan_in_fan_out  # the tree py2-fan_in_fan_out backs up to blobs
    # Variants that show the sample's code runs once its own packaging slip is put right (see the doc).
    copy "$py/samples-v2/serialize_arguments" py2-serialize_arguments-with-shared_code
    copy "$py/samples/serialize_arguments/shared_code" py2-serialize_arguments-with-shared_code/shared_code
    copy "$py/samples-v2/function_chaining" py2-function_chaining-hostjson-fixed
    "$python" - "$apps/py2-function_chaining-hostjson-fixed/host.json" <<'EOF'
import json, sys
path = sys.argv[1]
text = open(path, encoding="utf-8").read()
first, _ = json.JSONDecoder().raw_decode(text)  # the file holds two objects: keep the first
open(path, "w", encoding="utf-8").write(json.dumps(first, indent=2))
EOF

    dts=$work/src/dts
    clone Azure-Samples/Durable-Task-Scheduler "$dts" samples/durable-functions/python
    for d in hello-cities fan-out-fan-in work-item-filtering work-item-filtering-app-b; do
        copy "$dts/samples/durable-functions/python/$d" "dts-$d"
    done

    ext=$work/src/extension
    clone Azure/azure-functions-durable-extension "$ext" test/e2e/Apps/BasicPython
    copy "$ext/test/e2e/Apps/BasicPython" ext-BasicPython
fi

cd "$repo_root"
exec "$python" scripts/check_public_samples.py "$apps" "$@"
