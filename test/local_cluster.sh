# Sourced by the shell tests that run a tools/dml-local cluster, with the
# test's short name as its argument:
#
#	. "${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/test/local_cluster.sh" NAME
#
# Sets srcdir and builddir, fail, a temporary directory $tmp holding the
# cluster's run directory $run, and local_ (the dml-local command). On
# exit, however the test ends, the cluster goes down and $tmp goes; a test
# with more to undo defines before_cleanup, which runs first.

srcdir=${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=${DML_BUILDDIR:-.}
builddir=$(cd "$builddir" && pwd)

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

tmp=$(mktemp -d -t "dml-$1.XXXXXX") || fail "mktemp"
run=$tmp/run
local_=("$srcdir/tools/dml-local")

local_cluster_cleanup() {
	! declare -F before_cleanup >/dev/null || before_cleanup
	"${local_[@]}" down --dir "$run" >/dev/null 2>&1
	rm -rf "$tmp"
}
trap local_cluster_cleanup EXIT

# dmlctl for the cluster of $run, once it is up.
local_cluster_dmlctl() {
	dmlctl=("$builddir/tools/dmlctl" -s "$(. "$run/env" && echo "$DML_SCHEDULER")"
		--secret "$run/secret")
}

# Submit a synthetic lsq job of one dense table with sgd: $tmp/NAME.conf
# from NAME and the [job] lines given ("staleness = 0", ...), then
# keys = dim, lr and the rest as the table's, and the lines after a
# "--table" argument in the table's section. With --wait first, waits
# (120 s at most) until the job ends; its report is then in $tmp/submit.out.
# With zones A and B: the bytes their link carried each way so far, in ab
# and ba (dml-local links).
link_bytes() {
	"${local_[@]}" links --dir "$run" >"$tmp/links.out" 2>&1 || fail "links: $(cat "$tmp/links.out")"
	[[ $(cat "$tmp/links.out") =~ ^A\ B\ ([0-9]+)\ ([0-9]+)$ ]] || fail "links: $(cat "$tmp/links.out")"
	ab=${BASH_REMATCH[1]}
	ba=${BASH_REMATCH[2]}
}

local_cluster_lsq() {
	local wait=() job=() table=()
	[ "$1" != --wait ] || { wait=(timeout 120); shift; }
	local name=$1 dim=$2 lr=$3
	shift 3
	while [ $# -gt 0 ] && [ "$1" != --table ]; do
		job+=("$1")
		shift
	done
	[ $# -eq 0 ] || { shift; table=("$@"); }
	printf '%s\n' "[job]" "name = $name" "app = lsq" "data = synthetic" "dim = $dim" \
		"${job[@]}" "[table]" "id = 0" "keys = $dim" "optimizer = sgd" "lr = $lr" \
		"${table[@]}" >"$tmp/$name.conf"
	"${wait[@]}" "${dmlctl[@]}" submit "$tmp/$name.conf" ${wait:+--wait} >"$tmp/submit.out" 2>&1 ||
		fail "submit $name: $(cat "$tmp/submit.out")"
}
