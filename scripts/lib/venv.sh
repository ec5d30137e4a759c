# Sourced by the checks that need Python tools from PyPI (scripts/check-deploy.sh,
# scripts/check-api-contract.sh): `venvs` is where their virtual environments live
# ($PUSHRELAY_VENVS, default /opt/pushrelay-venvs, or ~/.cache/pushrelay-venvs when /opt
# is not writable), and `venv NAME REQUIREMENTS` makes one with exactly these pinned
# packages (python3-venv from apt if missing), reused while the pins are the same.
venvs="${PUSHRELAY_VENVS:-/opt/pushrelay-venvs}"
if ! mkdir -p "$venvs" 2>/dev/null || [ ! -w "$venvs" ]; then
  venvs="${XDG_CACHE_HOME:-$HOME/.cache}/pushrelay-venvs"
  mkdir -p "$venvs"
fi

venv() {
  local dir="$venvs/$1" wanted="$2"
  if [ -x "$dir/bin/python" ] && [ "$(cat "$dir/.requirements" 2>/dev/null)" = "$wanted" ]; then
    return 0
  fi
  echo "installing into $dir: $wanted"
  rm -rf "$dir"
  if ! python3 -m venv "$dir" >/dev/null 2>&1; then
    rm -rf "$dir"
    echo "python3-venv is missing; installing it (apt-get)"
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends python3-venv >/dev/null
    python3 -m venv "$dir"
  fi
  # shellcheck disable=SC2086  # one word per requirement
  "$dir/bin/python" -m pip install --quiet --disable-pip-version-check $wanted
  echo "$wanted" > "$dir/.requirements"
}
