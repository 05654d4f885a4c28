#!/usr/bin/env bash
# Builds the daemon and the benchmark in release and runs the benchmark; arguments are passed
# through, e.g. `scripts/bench.sh --concurrency 1,50 --tokens 500`. See docs/benchmarks.md.
#
# The bench compares the daemon with nginx relaying the same streams. When /usr/sbin/nginx is
# missing this script installs Debian's nginx package with apt-get (through `sudo -n` when not
# root); if that is not possible it says so and the bench runs without the nginx path.
# `--no-nginx` skips both the installation and the nginx path.
set -euo pipefail
cd "$(dirname "$0")/.."

want_nginx=1
for arg in "$@"; do
    [[ "$arg" == "--no-nginx" ]] && want_nginx=0
done

if [[ $want_nginx == 1 && ! -x /usr/sbin/nginx ]]; then
    if [[ $(id -u) == 0 ]]; then
        sudo=()
    else
        sudo=(sudo -n)
    fi
    apt=("${sudo[@]}" env DEBIAN_FRONTEND=noninteractive apt-get -y -q)
    echo "bench.sh: installing nginx (skip with --no-nginx)" >&2
    # A fresh system may have no package lists yet: update them once if the first try fails.
    if ! "${apt[@]}" install nginx >&2 && ! { "${apt[@]}" update >&2 && "${apt[@]}" install nginx >&2; }; then
        echo "bench.sh: could not install nginx; the bench runs without the nginx path" >&2
    fi
fi

cargo build --release -p elfgate-server -p elfgate-bench
exec target/release/elfgate-bench "$@"
