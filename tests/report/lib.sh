# tests/report/lib.sh — sourced by the report tests after setting $shardc: the repository root as the
# working directory, a temporary directory $tmp removed at exit, failures counted by bad(), has() and secs().
shardc=$(cd "$(dirname "$shardc")" && pwd)/$(basename "$shardc")
cd "$(dirname "${BASH_SOURCE[0]}")/../.."
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# has GREP-ARGS: grep -q that reads its input whole: `producer | grep -q` under pipefail fails when grep exits
# at its match before the producer has written all (SIGPIPE; a loaded machine's flaky FAIL, report_compare)
has() { grep "$@" >/dev/null; }

# seconds from "1.23 ms" / "850 us" / "1.2 s"
secs() { awk '{ v = $1; u = $2; print v * (u == "ms" ? 1e-3 : u == "us" ? 1e-6 : 1) }'; }
