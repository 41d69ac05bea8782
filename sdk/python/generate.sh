#!/usr/bin/env bash
# Regenerates weft/v1/*_pb2*.py(i) from the repository's .proto files with
# grpcio-tools 1.85.1 (pip install grpcio-tools==1.85.1, the version the
# tests pin); tests/test_client.py checks that
# the checked-in files are what this produces.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
python="${PYTHON:-python3}"
"$python" -m grpc_tools.protoc -I "$here/../../proto/protos" \
  --python_out="$here" --pyi_out="$here" --grpc_python_out="$here" \
  weft/v1/runs.proto weft/v1/workers.proto
