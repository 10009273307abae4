#!/usr/bin/env bash
# rocm_root.sh - build (once) and use a Debian chroot that carries a ROCm/HIP
# toolchain new enough for lightwave's AMD build path.
#
#   scripts/rocm_root.sh ROOT_DIR
#       Create the chroot at ROOT_DIR unless ROOT_DIR/.lightwave-rocm-ready
#       exists and matches this script's package-list version.  Tries Debian
#       sid + experimental first (HIP 7.2, clang 22, hipBLASLt); if that fails
#       falls back to Debian trixie (HIP 5.7, no hipBLASLt).  Prints what it got.
#
#   scripts/rocm_root.sh ROOT_DIR --exec SRC_DIR -- CMD [ARG...]
#       Mount /proc and bind-mount SRC_DIR at ROOT_DIR/src (each only if not
#       already mounted), bind-mount $CCACHE_DIR at the same path if set, run
#       CMD inside the chroot with working directory /src, unmount what it
#       mounted (also on error/signal) and exit with CMD's status.
#
#   scripts/rocm_root.sh ROOT_DIR --info
#       Print the stamp of an existing root (exit 1 if not ready).
#
# Environment:
#   LW_ROCM_MIRROR     Debian mirror (default http://deb.debian.org/debian)
#   LW_ROCM_SUITE      force "sid-experimental" or "trixie" (default: try both)
#   LW_ROCM_PASS_ENV   extra variable names to pass into the chroot in --exec
#                      (space separated).  Always passed: CI, TERM, MAKEFLAGS,
#                      and every CCACHE_*, CMAKE_*, CTEST_*, GTEST_*, HIP_*,
#                      ROCM_*, LW_*, LIGHTWAVE_* variable.
#
# Requires root, debootstrap (installed with apt-get if missing), mount.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive LC_ALL=C.UTF-8 LANG=C.UTF-8

# ---------------------------------------------------------------------------
# Package lists.  Bump LW_ROCM_ROOT_FORMAT when the way the root is built
# changes; the package lists themselves are hashed into the stamp too.
LW_ROCM_ROOT_FORMAT=2
COMMON_PKGS="cmake make ninja-build g++ ccache ca-certificates python3 pkg-config libgtest-dev libspdlog-dev libfmt-dev libcli11-dev nlohmann-json3-dev libpcre2-dev libicu-dev"
SID_PKGS="hipcc libamdhip64-dev libhipblaslt-dev libhipblas-dev libhipcub-dev \
librccl-dev librocrand-dev libhiprand-dev rocm-cmake rocminfo"
TRIXIE_PKGS="hipcc libamdhip64-dev libhipblas-dev libhipcub-dev librccl-dev \
librocrand-dev libhiprand-dev rocm-cmake rocminfo"
# ---------------------------------------------------------------------------

MIRROR="${LW_ROCM_MIRROR:-http://deb.debian.org/debian}"
STAMP_NAME=".lightwave-rocm-ready"
APT_OPTS=(-o Acquire::Check-Valid-Until=false -o Acquire::Retries=3
          -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold)

die() { echo "rocm_root.sh: error: $*" >&2; exit 1; }
log() { echo "rocm_root.sh: $*" >&2; }

usage() {
  sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' >&2
  exit 2
}

stamp_version() {
  printf '%s\n' "$LW_ROCM_ROOT_FORMAT" "$COMMON_PKGS" "$SID_PKGS" "$TRIXIE_PKGS" \
    | sha256sum | cut -c1-16
}

[ $# -ge 1 ] || usage
case "$1" in -h|--help) usage ;; esac
ROOT_ARG="$1"; shift
[ -n "$ROOT_ARG" ] || usage
[ "$(id -u)" -eq 0 ] || die "must run as root (needs debootstrap, chroot and mount)"
mkdir -p "$ROOT_ARG"
ROOT="$(cd "$ROOT_ARG" && pwd -P)"
[ "$ROOT" != "/" ] || die "refusing to use / as the root directory"
STAMP="$ROOT/$STAMP_NAME"
VERSION="$(stamp_version)"

# Serialise concurrent invocations on the same root (creation and --exec).
LOCK="${ROOT%/}.lock"
exec 9>"$LOCK"
if ! flock -n 9; then
  log "waiting for lock $LOCK (another rocm_root.sh is using $ROOT)"
  flock 9
fi

# All mount points currently below $ROOT (deepest first).
mounts_below() {
  awk -v r="$ROOT/" '{ p=$5; gsub(/\\040/, " ", p); if (index(p "/", r) == 1) print p }' \
    /proc/self/mountinfo | sort -r
}

stamp_ok() {
  [ -f "$STAMP" ] && grep -qx "version=$VERSION" "$STAMP"
}

hip_version_of_root() {
  local h="$1/usr/include/hip/hip_version.h"
  [ -f "$h" ] || { echo "unknown"; return; }
  awk '/#define HIP_VERSION_MAJOR/{a=$3} /#define HIP_VERSION_MINOR/{b=$3}
       /#define HIP_VERSION_PATCH/{c=$3} END{print a "." b "." c}' "$h"
}

# ---------------------------------------------------------------------------
# --exec mode
# ---------------------------------------------------------------------------
do_exec() {
  [ $# -ge 1 ] || usage
  local src="$1"; shift
  [ "${1:-}" = "--" ] || die "--exec SRC_DIR must be followed by -- CMD..."
  shift
  [ $# -ge 1 ] || die "no command given after --"
  [ -d "$src" ] || die "source directory '$src' does not exist"
  src="$(cd "$src" && pwd -P)"
  stamp_ok || die "$ROOT is not a ready ROCm root (missing or stale $STAMP_NAME); run: $0 $ROOT"
  case "$ROOT/" in "$src"/*) die "root $ROOT lies inside source dir $src";; esac

  MOUNTED=()
  cleanup_mounts() {
    local i
    for (( i=${#MOUNTED[@]}-1; i>=0; i-- )); do
      umount "${MOUNTED[$i]}" 2>/dev/null || umount -l "${MOUNTED[$i]}" \
        || log "warning: could not unmount ${MOUNTED[$i]}"
    done
    MOUNTED=()
  }
  trap cleanup_mounts EXIT
  trap 'cleanup_mounts; exit 130' INT
  trap 'cleanup_mounts; exit 143' TERM

  mkdir -p "$ROOT/proc" "$ROOT/src"
  if ! mountpoint -q "$ROOT/proc"; then
    mount -t proc proc "$ROOT/proc"; MOUNTED+=("$ROOT/proc")
  fi
  if mountpoint -q "$ROOT/src"; then
    # Already mounted (by the user or an outer call): it must be the same tree.
    [ "$(stat -c %d:%i "$ROOT/src")" = "$(stat -c %d:%i "$src")" ] \
      || die "$ROOT/src is already mounted from a different directory than $src"
  else
    mount --bind "$src" "$ROOT/src"; MOUNTED+=("$ROOT/src")
  fi
  if [ -n "${CCACHE_DIR:-}" ]; then
    mkdir -p "$CCACHE_DIR"
    local cc; cc="$(cd "$CCACHE_DIR" && pwd -P)"
    [ "$cc" != "/" ] || die "CCACHE_DIR must not be /"
    mkdir -p "$ROOT$cc"
    if ! mountpoint -q "$ROOT$cc"; then
      mount --bind "$cc" "$ROOT$cc"; MOUNTED+=("$ROOT$cc")
    fi
  fi

  # Clean environment: the host's PATH/LD_LIBRARY_PATH/CUDA settings must not
  # leak into the chroot.
  local envs=(PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
              HOME=/root LANG=C.UTF-8 LC_ALL=C.UTF-8 TMPDIR=/tmp)
  local name
  for name in $(compgen -e); do
    case "$name" in
      CI|TERM|MAKEFLAGS|CCACHE_*|CMAKE_*|CTEST_*|GTEST_*|HIP_*|ROCM_*|LW_*|LIGHTWAVE_*)
        envs+=("$name=${!name}") ;;
    esac
  done
  for name in ${LW_ROCM_PASS_ENV:-}; do
    [ -n "${!name+x}" ] && envs+=("$name=${!name}")
  done

  # Run CMD in the background and wait for it, so that a TERM/INT sent to this
  # script is forwarded at once (bash would otherwise run the trap only after
  # CMD ended on its own); unmount only after CMD has exited.
  local rc=0
  exec 8<&0
  chroot "$ROOT" /usr/bin/env -i "${envs[@]}" /bin/sh -c 'cd /src && exec "$@"' lightwave-rocm "$@" \
    <&8 8<&- 9>&- &
  CHILD=$!
  exec 8<&-
  # shellcheck disable=SC2317  # invoked from the traps below
  forward() {
    kill "-$1" "$CHILD" 2>/dev/null || true
    wait "$CHILD" 2>/dev/null || true
    cleanup_mounts
    exit "$2"
  }
  trap 'forward INT 130' INT
  trap 'forward TERM 143' TERM
  wait "$CHILD" || rc=$?
  trap - INT TERM
  cleanup_mounts
  trap - EXIT
  exit "$rc"
}

# ---------------------------------------------------------------------------
# creation mode
# ---------------------------------------------------------------------------
MARKER_NAME=".lightwave-rocm-root"
wipe_root() {
  local m
  # Never wipe a directory we did not create: it must be empty or carry our marker.
  if [ -n "$(ls -A "$ROOT")" ] && [ ! -e "$ROOT/$MARKER_NAME" ]; then
    die "$ROOT is not empty and is not a lightwave ROCm root; refusing to wipe it"
  fi
  for m in $(mounts_below); do
    umount "$m" 2>/dev/null || umount -l "$m" || die "cannot unmount $m; not wiping $ROOT"
  done
  [ -z "$(mounts_below)" ] || die "something is still mounted under $ROOT; not wiping it"
  # --one-file-system: never descend into a mount that slipped through.
  rm -rf --one-file-system "$ROOT"
  mkdir -p "$ROOT"
  : >"$ROOT/$MARKER_NAME"
}

# try_suite SUITE PKGS... ; returns non-zero on failure (root left dirty)
try_suite() {
  local suite="$1"; shift
  local dist target=()
  case "$suite" in
    sid-experimental) dist=sid; target=(-t experimental) ;;
    trixie) dist=trixie ;;
    *) die "unknown suite $suite" ;;
  esac
  log "creating $suite root in $ROOT (debootstrap $dist)"
  wipe_root
  debootstrap --variant=minbase "$dist" "$ROOT" "$MIRROR" >"$ROOT.debootstrap.log" 2>&1 \
    || { log "debootstrap $dist failed, see $ROOT.debootstrap.log"; tail -n 20 "$ROOT.debootstrap.log" >&2; return 1; }
  if [ "$suite" = sid-experimental ]; then
    echo "deb $MIRROR experimental main" >"$ROOT/etc/apt/sources.list.d/experimental.list"
  fi
  # No daemons may start inside the chroot during package installs.
  printf '#!/bin/sh\nexit 101\n' >"$ROOT/usr/sbin/policy-rc.d"
  chmod +x "$ROOT/usr/sbin/policy-rc.d"
  local env=(/usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
             DEBIAN_FRONTEND=noninteractive LANG=C.UTF-8 LC_ALL=C.UTF-8)
  chroot "$ROOT" "${env[@]}" apt-get "${APT_OPTS[@]}" -q update || return 1
  # shellcheck disable=SC2086
  chroot "$ROOT" "${env[@]}" apt-get "${APT_OPTS[@]}" -q install -y "${target[@]}" \
    $COMMON_PKGS "$@" || return 1
  chroot "$ROOT" "${env[@]}" apt-get clean
  rm -rf "$ROOT"/var/lib/apt/lists/*_Packages "$ROOT"/var/lib/apt/lists/*_Translation-* \
         "$ROOT"/usr/share/doc "$ROOT"/usr/share/man
  [ -x "$ROOT/usr/bin/hipcc" ] || { log "hipcc missing after install"; return 1; }
  SUITE="$suite"
}

do_create() {
  if stamp_ok; then
    log "root $ROOT is ready (stamp matches):"
    cat "$STAMP"
    return 0
  fi
  [ -f "$STAMP" ] && log "stamp in $ROOT is stale (want version=$VERSION); rebuilding"
  command -v debootstrap >/dev/null 2>&1 || {
    log "installing debootstrap on the host"
    apt-get "${APT_OPTS[@]}" -q update && apt-get "${APT_OPTS[@]}" -q install -y debootstrap
  } || die "debootstrap is not installed and could not be installed"

  local t0=$SECONDS suites
  case "${LW_ROCM_SUITE:-}" in
    "") suites="sid-experimental trixie" ;;
    sid-experimental|trixie) suites="$LW_ROCM_SUITE" ;;
    *) die "LW_ROCM_SUITE must be sid-experimental or trixie" ;;
  esac
  SUITE=""
  local s
  for s in $suites; do
    # shellcheck disable=SC2086  # package lists are meant to be split
    case "$s" in
      sid-experimental) try_suite "$s" $SID_PKGS && break ;;
      trixie) try_suite "$s" $TRIXIE_PKGS && break ;;
    esac
    log "suite $s failed"
    SUITE=""
  done
  [ -n "$SUITE" ] || { wipe_root; die "could not create a ROCm root in $ROOT (tried: $suites)"; }

  local hip clang blaslt hipclang="" c
  hip="$(hip_version_of_root "$ROOT")"
  # The ROCm clang: Debian ships it as /usr/lib/llvm-N/bin/clang++ (take the
  # newest N; the root only carries the one that its HIP was built with).
  for c in "$ROOT"/usr/lib/llvm-*/bin/clang++; do [ -x "$c" ] && hipclang="${c#"$ROOT"}"; done
  [ -n "$hipclang" ] || { wipe_root; die "no ROCm clang++ (/usr/lib/llvm-*/bin/clang++) found in the root"; }
  clang="$(chroot "$ROOT" "$hipclang" --version 2>/dev/null | head -n1 || echo unknown)"
  blaslt=OFF
  [ -f "$ROOT/usr/include/hipblaslt/hipblaslt.h" ] && blaslt=ON
  # Initial cache for `cmake -C /etc/lightwave-rocm.cmake`: the settings that
  # Debian's /usr layout needs (trixie's CMake 3.31 finds neither the compiler,
  # which is only clang++-17 on PATH, nor hip-lang under lib/x86_64-linux-gnu).
  cat >"$ROOT/etc/lightwave-rocm.cmake" <<EOF_CACHE
# Written by scripts/rocm_root.sh ($SUITE, HIP $hip). Use: cmake -C /etc/lightwave-rocm.cmake ...
set(CMAKE_HIP_COMPILER "$hipclang" CACHE FILEPATH "ROCm clang++ (HIP compiler)")
set(CMAKE_HIP_COMPILER_ROCM_ROOT "/usr" CACHE PATH "ROCm root (Debian: /usr)")
set(CMAKE_HIP_COMPILER_ROCM_LIB "/usr/lib/x86_64-linux-gnu" CACHE PATH "dir holding cmake/hip-lang")
set(ROCM_PATH "/usr" CACHE PATH "ROCm root (Debian: /usr)")
set(LW_ROCM_HAVE_HIPBLASLT $blaslt CACHE BOOL "hipBLASLt is installed in this ROCm root")
EOF_CACHE
  {
    echo "version=$VERSION"
    echo "suite=$SUITE"
    echo "hip=$hip"
    echo "clang=$clang"
    echo "hipblaslt=$blaslt"
    echo "hip_compiler=$hipclang"
    echo "cmake_initial_cache=/etc/lightwave-rocm.cmake"
    echo "created=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
  } >"$STAMP.tmp"
  mv "$STAMP.tmp" "$STAMP"
  log "ROCm root ready in $ROOT after $((SECONDS - t0)) s: suite=$SUITE HIP $hip, hipBLASLt=$blaslt, HIP compiler $hipclang"
  log "$clang"
  cat "$STAMP"
}

case "${1:-}" in
  "") do_create ;;
  --exec) shift; do_exec "$@" ;;
  --info) stamp_ok || die "$ROOT is not ready"; cat "$STAMP" ;;
  *) usage ;;
esac
