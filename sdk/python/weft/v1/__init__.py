"""Generated from proto/protos/weft/v1/*.proto by sdk/python/generate.sh
(grpcio-tools): do not edit; tests/test_stubs.py checks they match."""
