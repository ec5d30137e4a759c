# Sourced by scripts/bench-peer.sh and scripts/bench-instructions.sh (from the repo root):
# installs what the benchmarks need if it is missing, builds the release binaries
# unless NO_BUILD=1, and builds the Go helper (peerbench).
#
#   bench_install apt-package...     # Debian packages, on top of scripts/install-deps.sh
#   bench_pip python-package...      # PyPI packages, for the python3 on PATH
#   bench_binaries                   # sets BIN (release binaries)
#   bench_peerbench DIR              # builds DIR/peerbench from benchmarks/peers/go

bench_install() {
  scripts/install-deps.sh
  local missing=() p
  for p in "$@"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
  done
  if [ ${#missing[@]} -gt 0 ]; then
    echo "installing: ${missing[*]}" >&2
    local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  fi
}

bench_pip() {
  local p
  python3 -m pip --version >/dev/null 2>&1 || bench_install python3-pip
  for p in "$@"; do
    python3 -c "import importlib.metadata as m; m.version('$p')" 2>/dev/null && continue
    echo "installing (pip): $p" >&2
    python3 -m pip install -q "$p" 2>/dev/null \
      || python3 -m pip install -q --break-system-packages "$p"
  done
}

# The release binaries: built here unless NO_BUILD=1 (then BIN, default .build/release,
# must hold them already).
bench_binaries() {
  if [ "${NO_BUILD:-0}" = 1 ]; then
    BIN="${BIN:-$PWD/.build/release}"
  else
    swift build -c release
    BIN="$(swift build -c release --show-bin-path)"
  fi
  local b
  for b in ingest encryptor dispatcher feedback devbroker provider-fakes; do
    [ -x "$BIN/$b" ] || { echo "missing $BIN/$b (build release binaries or set BIN)" >&2; return 1; }
  done
  export BIN
}

bench_peerbench() {
  local out=$1
  mkdir -p "$out"
  (
    cd benchmarks/peers/go
    export GOFLAGS=-mod=mod GOPROXY=off GOTOOLCHAIN=local
    export GOCACHE="${GOCACHE:-$out/gocache}" GOPATH="${GOPATH:-$out/gopath}"
    go build -o "$out/peerbench" .
  )
}
