#!/usr/bin/env bash
# Builds the daemon and the benchmark in release and runs the benchmark; arguments are passed
# through, e.g. `scripts/bench.sh --concurrency 1,50 --tokens 500`. See docs/benchmarks.md.
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -p elfgate-server -p elfgate-bench
exec target/release/elfgate-bench "$@"
