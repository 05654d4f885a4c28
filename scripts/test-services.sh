# shellcheck shell=bash
# Sourced by scripts/test.sh (not run): gives the test suite a PostgreSQL and a NATS server with
# JetStream. A URL the caller already set in ELFGATE_TEST_POSTGRES_URL or ELFGATE_TEST_NATS_URL is
# used as it is; otherwise a private instance is started on a free loopback port with its data in
# a temporary directory (Debian's postgresql or nats-server package is installed first when it is
# missing), and an EXIT trap stops it and removes the directory when the caller's shell ends.
#
# It also starts the trace store of the telemetry tests (Arize Phoenix, from tools/phoenix-venv,
# which scripts/install-phoenix.sh installs) on a free loopback port unless
# ELFGATE_TEST_PHOENIX_URL names one, without waiting for it: it takes 20 s or more to start, which
# the build of the tests covers, and the tests wait until it answers. Without the venv it says so
# and the telemetry tests skip (or fail under REQUIRE_TRACE_TESTS=require).
#
# Exports, besides the URLs, for an instance started here (so that a test can stop and start
# it): ELFGATE_TEST_PG_BIN (the directory of pg_ctl), ELFGATE_TEST_PG_DATA (the data directory),
# ELFGATE_TEST_PG_RUNAS (the user pg_ctl must run as, via runuser, when the caller is root; empty
# otherwise) and ELFGATE_TEST_NATS_BIN (the nats-server executable). The server's settings (port,
# socket directory, listen address, connection limit) live in the data directory, not on pg_ctl's
# command line, so `pg_ctl -D "$ELFGATE_TEST_PG_DATA" start` after a stop brings it back on the
# same port, as `pg_ctl restart` does.

# The caller's shell keeps these functions and variables: everything is prefixed test_services_.
test_services_dir=
test_services_pg_bin=
test_services_pg_data=
test_services_nats_pid=
test_services_phoenix_pid=
test_services_status=

test_services_say() {
  echo "test-services: $*" >&2
}

# Installs Debian packages the way scripts/install-test-deps.sh does.
test_services_apt_install() {
  if ! command -v apt-get >/dev/null 2>&1; then
    test_services_say "$* is missing and there is no apt-get to install it; install it, or set" \
      "ELFGATE_TEST_POSTGRES_URL / ELFGATE_TEST_NATS_URL to a running server"
    return 1
  fi
  local sudo=()
  if [[ "$(id -u)" != 0 ]]; then
    sudo=(sudo -n)
  fi
  test_services_say "installing $* (apt-get)"
  if ! "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
    apt-get install -y --no-install-recommends "$@" >/dev/null; then
    "${sudo[@]}" apt-get update >/dev/null
    "${sudo[@]}" env DEBIAN_FRONTEND=noninteractive \
      apt-get install -y --no-install-recommends "$@" >/dev/null
  fi
}

# A port nothing listens on now. Another process may still take it before our server binds it:
# the callers retry with another port when the bind fails.
test_services_free_port() {
  if command -v python3 >/dev/null 2>&1; then
    python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'
    return
  fi
  local port _
  for _ in {1..100}; do
    port=$((20000 + RANDOM % 20000))
    if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      echo "$port"
      return 0
    fi
  done
  return 1
}

# The newest PostgreSQL of Debian's layout, which installs versions side by side.
test_services_pg_bin_dir() {
  local dir
  dir=$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  if [[ -x "$dir/initdb" && -x "$dir/pg_ctl" ]]; then
    echo "$dir"
  fi
}

# Runs a PostgreSQL program as the user the server runs as: PostgreSQL refuses to run as root.
# From the temporary directory, because the caller's may be closed to that user.
test_services_as_pg() {
  if [[ "$(id -u)" == 0 ]]; then
    (cd "$test_services_dir" && runuser -u postgres -- "$@")
  else
    (cd "$test_services_dir" && "$@")
  fi
}

test_services_make_dir() {
  if [[ -n "$test_services_dir" ]]; then
    return 0
  fi
  test_services_dir=$(mktemp -d) || return 1
  test_services_chain_exit_trap
}

test_services_start_postgres() {
  local bin
  bin=$(test_services_pg_bin_dir)
  if [[ -z "$bin" ]]; then
    test_services_apt_install postgresql || return 1
    bin=$(test_services_pg_bin_dir)
    if [[ -z "$bin" ]]; then
      test_services_say "no initdb and pg_ctl under /usr/lib/postgresql/*/bin after installing postgresql"
      return 1
    fi
  fi
  test_services_make_dir || return 1
  local dir=$test_services_dir runas=
  if [[ "$(id -u)" == 0 ]]; then
    runas=postgres
    if ! id -u postgres >/dev/null 2>&1; then
      test_services_say "running as root, and there is no postgres user to run PostgreSQL as"
      return 1
    fi
    chown postgres: "$dir" || return 1
    if ! runuser -u postgres -- test -w "$dir"; then
      test_services_say "the postgres user cannot write to $dir (TMPDIR closed to it?)"
      return 1
    fi
  fi
  local data=$dir/data
  # UTF8 with the C locale: the same encoding and collation whatever the machine's locale is
  # (initdb would otherwise pick SQL_ASCII under a bare C locale).
  if ! test_services_as_pg "$bin/initdb" -D "$data" -A trust -U postgres -E UTF8 --no-locale \
    --no-sync >"$dir/initdb.log" 2>&1; then
    test_services_say "initdb failed:"
    cat "$dir/initdb.log" >&2
    return 1
  fi
  # In the configuration rather than in pg_ctl's -o: pg_ctl restart would replay -o (from
  # postmaster.opts), but a test's plain stop and start would not, and the server would come up
  # on Debian's default port and socket directory, where the system's own cluster may live.
  echo "include = 'test-services.conf'" >>"$data/postgresql.conf" || return 1
  # From here on the EXIT trap stops it: a start that timed out may still come up.
  test_services_pg_bin=$bin
  test_services_pg_data=$data
  local port attempt
  for attempt in 1 2 3 4 5; do
    port=$(test_services_free_port) || return 1
    {
      echo "port = $port"
      echo "listen_addresses = '127.0.0.1'"
      echo "unix_socket_directories = '${dir//\'/\'\'}'"
      # Every test's daemons hold pools of their own.
      echo "max_connections = 400"
    } >"$data/test-services.conf" || return 1
    if [[ -n "$runas" ]]; then
      chown postgres: "$data/test-services.conf" || return 1
    fi
    # The server's user creates its log: it could not append to one of ours.
    rm -f "$dir/pg.log"
    if test_services_as_pg "$bin/pg_ctl" -D "$data" -l "$dir/pg.log" -w start \
      >"$dir/pg_ctl.log" 2>&1; then
      break
    fi
    if ! grep -qs 'Address already in use' "$dir/pg.log" || [[ $attempt == 5 ]]; then
      test_services_say "PostgreSQL did not start:"
      cat "$dir/pg_ctl.log" >&2
      if [[ -f "$dir/pg.log" ]]; then
        tail -n 20 "$dir/pg.log" >&2
      fi
      return 1
    fi
  done
  local version
  version=$("$bin/pg_ctl" --version)
  version=${version#*) }
  test_services_say "PostgreSQL ${version%% *} on 127.0.0.1:$port (private, $dir)"
  export ELFGATE_TEST_POSTGRES_URL="postgres://postgres@127.0.0.1:$port/postgres"
  export ELFGATE_TEST_PG_BIN=$bin
  export ELFGATE_TEST_PG_DATA=$data
  export ELFGATE_TEST_PG_RUNAS=$runas
}

# Waits until the server accepts connections: 0 when it does, 1 when it ended, 2 after 30 s. A
# connection alone does not tell: whoever took the port first would accept it while our server
# is still failing to bind; the log says the listener is its own.
test_services_wait_nats() {
  local pid=$1 port=$2 log=$3 _
  for _ in {1..300}; do
    if ! kill -0 "$pid" 2>/dev/null; then
      return 1
    fi
    if grep -q 'Server is ready' "$log" && (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
      return 0
    fi
    sleep 0.1
  done
  return 2
}

# nats-server on PATH, or where Debian's package puts it: /usr/sbin, which is not on the PATH of
# users other than root.
test_services_nats_bin() {
  command -v nats-server || { [[ -x /usr/sbin/nats-server ]] && echo /usr/sbin/nats-server; }
}

test_services_start_nats() {
  local bin
  if ! bin=$(test_services_nats_bin); then
    test_services_apt_install nats-server || return 1
    if ! bin=$(test_services_nats_bin); then
      test_services_say "no nats-server after installing nats-server"
      return 1
    fi
  fi
  test_services_make_dir || return 1
  local dir=$test_services_dir port attempt pid status
  for attempt in 1 2 3 4 5; do
    port=$(test_services_free_port) || return 1
    : >"$dir/nats.log" || return 1
    "$bin" -a 127.0.0.1 -p "$port" -js -sd "$dir/nats" </dev/null >>"$dir/nats.log" 2>&1 &
    pid=$!
    test_services_nats_pid=$pid
    status=0
    test_services_wait_nats "$pid" "$port" "$dir/nats.log" || status=$?
    if [[ $status == 0 ]]; then
      break
    fi
    if [[ $status == 2 ]]; then
      test_services_say "nats-server did not accept connections within 30 s:"
    elif ! grep -qi 'address already in use' "$dir/nats.log" || [[ $attempt == 5 ]]; then
      test_services_say "nats-server did not start:"
    else
      wait "$pid" 2>/dev/null || true
      continue
    fi
    tail -n 20 "$dir/nats.log" >&2
    return 1
  done
  local version
  version=$("$bin" --version)
  test_services_say "NATS ${version##* } with JetStream on 127.0.0.1:$port (private, $dir)"
  export ELFGATE_TEST_NATS_URL="nats://127.0.0.1:$port"
  export ELFGATE_TEST_NATS_BIN=$bin
}

test_services_start_phoenix() {
  local bin
  bin="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/tools/phoenix-venv/bin/phoenix"
  if [[ ! -x "$bin" ]]; then
    test_services_say "no trace store: tools/phoenix-venv is missing (scripts/install-phoenix.sh)"
    return 0
  fi
  test_services_make_dir || return 1
  local dir=$test_services_dir port grpc_port
  port=$(test_services_free_port) || return 1
  grpc_port=$(test_services_free_port) || return 1
  mkdir -p "$dir/phoenix" || return 1
  PHOENIX_HOST=127.0.0.1 PHOENIX_PORT=$port PHOENIX_GRPC_PORT=$grpc_port \
    PHOENIX_WORKING_DIR="$dir/phoenix" PHOENIX_TELEMETRY_ENABLED=false \
    "$bin" serve </dev/null >"$dir/phoenix.log" 2>&1 &
  test_services_phoenix_pid=$!
  test_services_say "Arize Phoenix starting on 127.0.0.1:$port (private, log $dir/phoenix.log)"
  export ELFGATE_TEST_PHOENIX_URL="http://127.0.0.1:$port"
}

# Runs from the EXIT trap. Nothing here may fail: under the caller's set -e a failing command
# would end the trap early and replace the caller's exit status with its own.
test_services_cleanup() {
  test_services_status=$?
  if [[ -n "$test_services_pg_data" ]]; then
    # Immediate: the data is thrown away, a checkpoint would only cost time. A test may have left
    # the server stopped; then there is nothing to stop.
    test_services_as_pg "$test_services_pg_bin/pg_ctl" -D "$test_services_pg_data" -m immediate \
      -w stop >/dev/null 2>&1 || true
  fi
  if [[ -n "$test_services_nats_pid" ]]; then
    kill "$test_services_nats_pid" 2>/dev/null || true
    # Reaped before its store is removed under it.
    wait "$test_services_nats_pid" 2>/dev/null || true
  fi
  if [[ -n "$test_services_phoenix_pid" ]]; then
    kill "$test_services_phoenix_pid" 2>/dev/null || true
    wait "$test_services_phoenix_pid" 2>/dev/null || true
  fi
  if [[ -n "$test_services_dir" ]]; then
    rm -rf "$test_services_dir" || true
  fi
  return 0
}

# Keeps whatever EXIT trap the caller had, run after ours.
test_services_chain_exit_trap() {
  local prev
  prev=$(trap -p EXIT)
  prev=${prev#trap -- }
  prev=${prev% EXIT}
  eval "prev=$prev"
  if [[ -z "$prev" ]]; then
    trap test_services_cleanup EXIT
    return
  fi
  # The old trap sees the exit status in $? as before: an else branch starts with its
  # condition's status, and set -e leaves a condition alone.
  # shellcheck disable=SC2064 # expanded now on purpose: the old trap's text is captured here
  trap "test_services_cleanup; if (exit \"\$test_services_status\"); then $prev
else $prev
fi" EXIT
}

test_services_start() {
  if [[ -n "${ELFGATE_TEST_POSTGRES_URL:-}" ]]; then
    test_services_say "PostgreSQL: using ELFGATE_TEST_POSTGRES_URL"
  else
    test_services_start_postgres || return
  fi
  if [[ -n "${ELFGATE_TEST_NATS_URL:-}" ]]; then
    test_services_say "NATS: using ELFGATE_TEST_NATS_URL"
  else
    test_services_start_nats || return
  fi
  if [[ -n "${ELFGATE_TEST_PHOENIX_URL:-}" ]]; then
    test_services_say "Phoenix: using ELFGATE_TEST_PHOENIX_URL"
  else
    test_services_start_phoenix || return
  fi
  # The tests that need these services fail instead of skipping when they are missing. (Not an
  # ELFGATE_ name: the daemon reads every ELFGATE_* variable as configuration.)
  export REQUIRE_CLUSTER_TESTS=require
}

test_services_start || return
