# Shared by the scripts/install-*.sh scripts (sourced, not run): a pinned npm package, or pinned
# pip requirements in a venv, installed under tools/ (git ignores it) unless already there.

# pinned_npm NAME PURPOSE PACKAGE VERSION DIR ENTRY [VAR=VALUE...]
#   Installs PACKAGE@VERSION with npm into DIR, with the VAR=VALUE settings in npm's environment,
#   unless DIR already holds exactly that version. ENTRY is the file the suite uses, which the
#   install must leave. NAME starts every message; PURPOSE says which tests need node and npm.
pinned_npm() {
  local name=$1 purpose=$2 package=$3 version=$4 dir=$5 entry=$6
  shift 6
  local manifest="$dir/node_modules/$package/package.json"
  if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
    echo "$name: node and npm are needed for $purpose (Debian: apt-get install nodejs npm)" >&2
    return 1
  fi
  if pinned_npm_present "$manifest" "$version" "$entry"; then
    return 0
  fi
  echo "$name: installing $package@$version into $dir (npm)"
  mkdir -p "$dir"
  env "$@" npm install --prefix "$dir" --no-audit --no-fund --save-exact "$package@$version" >/dev/null
  if ! pinned_npm_present "$manifest" "$version" "$entry"; then
    echo "$name: $entry is missing after the install" >&2
    return 1
  fi
}

# Whether ENTRY exists and MANIFEST names VERSION.
pinned_npm_present() {
  local manifest=$1 version=$2 entry=$3
  [[ -f "$entry" && -f "$manifest" ]] &&
    node -e "process.exit(require('./$manifest').version === '$version' ? 0 : 1)" 2>/dev/null
}

# pinned_venv NAME VENV REQUIREMENTS PROGRAM
#   Creates VENV and installs REQUIREMENTS into it with pip, unless VENV already holds exactly
#   these requirements (a copy of the file is kept in it as a stamp) and PROGRAM (a path inside
#   VENV) is there.
pinned_venv() {
  local name=$1 venv=$2 req=$3 program=$4
  local stamp="$venv/.requirements"
  if [[ -x "$venv/$program" && -f "$stamp" ]] && cmp -s "$req" "$stamp"; then
    return 0
  fi
  if ! command -v python3 >/dev/null 2>&1; then
    echo "$name: python3 is missing (scripts/install-test-deps.sh installs it)" >&2
    return 1
  fi
  echo "$name: installing $req into $venv"
  python3 -m venv "$venv"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$req"
  cp "$req" "$stamp"
}
