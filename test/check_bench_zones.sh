#!/usr/bin/env bash
# dml-bench zones in a tiny mode (0.3 epochs, 1 Gbit/s between the zones,
# one lossy codec, one round): it exits 0 and prints every configuration's
# row and the targets; the LAN reference ran and carried nothing across;
# each other row either ran or shows why its job was refused; when flat
# routing (b) ran, its link carried at least half of what two workers
# pushing and pulling the whole model every clock move; when the zone
# aggregators (c) or fp16 (d) ran too, they carried less than (b); and (d)
# and (e1) (int8 pushes, topk:0.1 delta pulls), through the aggregators,
# less than (c). Needs root, iproute2
# and Fashion-MNIST; skips otherwise. Exit status: 0 pass, 1 fail, 77 skip.
set -u

srcdir=${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=$(cd "${DML_BUILDDIR:-.}" && pwd)
data=/usr/share/datasets/fashion-mnist

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

. "$srcdir/tools/fleet.sh"
if ! why=$(fleet_link_check 2>&1); then
	echo "SKIP: $why"
	exit 77
fi
if [ ! -r "$data/train-images-idx3-ubyte.gz" ]; then
	echo "SKIP: no Fashion-MNIST in $data (tools/deps.sh installs dataset-fashion-mnist)"
	exit 77
fi

tmp=$(mktemp -d -t dml-bench-zones.XXXXXX) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT
out=$tmp/out
"$builddir/tools/dml-bench" zones --build "$builddir" --epochs 0.3 --wan 1gbit \
	--lossy int8 --lossy-pull topk:0.1 --rounds 1 >"$out" 2>&1
rc=$?
[ $rc = 0 ] || fail "dml-bench zones: exit $rc: $(tail -n 30 "$out")"
if grep -q "SKIP:" "$out"; then
	cat "$out"
	exit 77
fi

# The table's row of LABEL ("(b)"), after the per-run lines.
row() { awk -v l="$1" '/^ +configuration/ { t = 1 } t && $1 ~ "^\\" l "\\*?$"' "$out"; }
# A row's cross-zone bytes per example; empty when it did not run.
row_bytes() { row "$1" | sed -n 's/.* \([0-9][0-9]*\) B .*/\1/p'; }

grep -q "^targets (the issue's):" "$out" || fail "no targets: $(cat "$out")"
row "(a)" | grep -q "0 (no link) .* 0\.[0-9]\{4\} " || fail "(a): $(row "(a)")"
for l in "(b)" "(c)" "(d)" "(e1)"; do
	r=$(row "$l")
	[ -n "$r" ] || fail "no row $l: $(cat "$out")"
	[[ $r == *"FAIL: refused: "?* ]] || [ -n "$(row_bytes "$l")" ] || fail "$l: $r"
done

b=$(row_bytes "(b)")
model=$(((256 * 785 + 10 * 257) * 4))
if [ -n "$b" ]; then
	# zone B's two workers push and pull the model once a clock of 4 x 64 examples
	least=$((2 * 2 * model / (4 * 64) / 2))
	[ "$b" -ge "$least" ] || fail "(b) carried $b bytes per example, less than $least"
fi
c=$(row_bytes "(c)")
if [ -n "$b" ] && [ -n "$c" ]; then
	[ "$c" -lt "$b" ] || fail "(c) with aggregators carried $c bytes per example, (b) $b"
fi
d=$(row_bytes "(d)")
if [ -n "$b" ] && [ -n "$d" ]; then
	[ "$d" -lt "$b" ] || fail "(d) with fp16 carried $d bytes per example, (b) $b"
fi
# The aggregators send their zone's sums across in the codec: less than floats.
e=$(row_bytes "(e1)")
for x in "(d) $d" "(e1) $e"; do
	set -- $x
	if [ -n "$c" ] && [ -n "${2:-}" ]; then
		[ "$2" -lt "$c" ] || fail "$1 carried $2 bytes per example, (c) at full precision $c"
	fi
done
echo "PASS: dml-bench zones: (a) ran; (b) ${b:-refused}, (c) ${c:-refused}," \
	"(d) ${d:-refused}, (e1) ${e:-refused} bytes per example"
