#!/usr/bin/env bash
# Emulated links (tools/fleet.sh, dml-local --links): a worker on a slow link
# runs in a network namespace of its own behind a veth pair with a tbf rate
# limit on both ends, while the scheduler and the server listen on the host
# end of that link; a BSP job still finishes, and both directions of the
# worker's traffic went through the limit (each end sent at least the job's
# table bytes and held frames back to keep to its rate); `down`, and a
# failed `up`, leave no namespace or device behind. A rate that is not one is
# refused before anything starts. Needs root and iproute2; skips otherwise.
# Exit status: 0 pass, 1 fail, 77 skip.
set -u

. "${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/test/local_cluster.sh" links
. "$srcdir/tools/fleet.sh"

# Rates as tc takes them, and nothing else; addresses inside 198.18.0.0/15.
[ "$(fleet_link_bits 20mbit)" = 20000000 ] || fail "20mbit is '$(fleet_link_bits 20mbit)'"
[ "$(fleet_link_bits 1.5Gbit)" = 1500000000 ] || fail "1.5Gbit is '$(fleet_link_bits 1.5Gbit)'"
for bad in fast 100 100mbps -1mbit 1e3mbit 7kbit 20mbit/s ""; do
	! fleet_link_bits "$bad" >/dev/null || fail "rate '$bad' accepted"
done
[ "$(fleet_link_addr 0 1)" = 198.18.0.1 ] || fail "link 0's host end is $(fleet_link_addr 0 1)"
[ "$(fleet_link_addr 32767 2)" = 198.19.255.254 ] ||
	fail "the last link's far end is $(fleet_link_addr 32767 2)"

# A bad rate is refused before anything starts, root or not.
"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 --workers 2 --links 1gbit,fast \
	>"$tmp/bad.out" 2>&1
rc=$?
[ $rc = 2 ] || fail "--links 1gbit,fast: exit $rc, not 2"
grep -q "'fast' is not a link rate" "$tmp/bad.out" || fail "--links 1gbit,fast: $(cat "$tmp/bad.out")"
[ ! -e "$run/sched.pid" ] || fail "--links 1gbit,fast started the scheduler"

if ! why=$(fleet_link_check 2>&1); then
	echo "SKIP: $why"
	exit 77
fi

# The links a failed `up` made go with it: here the scheduler cannot write
# its port file, after both workers' links were made. (A namespace another
# run makes meanwhile would count as left behind.)
link_namespaces() { ip netns list | awk '$1 ~ /^dml-link-/ { print $1 }' | sort; }
before=$(link_namespaces)
mkdir -p "$run/sched.port"
"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 --workers 2 --links 20mbit \
	>"$tmp/failed.out" 2>&1 && fail "up with an unwritable port file succeeded"
grep -q "did not come up" "$tmp/failed.out" || fail "failed up: $(cat "$tmp/failed.out")"
[ ! -e "$run/links" ] || fail "a failed up left $run/links: $(cat "$run/links")"
left=$(comm -13 <(echo "$before") <(link_namespaces) | tr '\n' ' ')
[ -z "$left" ] || fail "a failed up left the namespaces $left"
rmdir "$run/sched.port"

# One server; worker 1 on loopback, worker 2 on a 20 Mbit/s link.
"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 --workers 2 \
	--links 0,20mbit >"$tmp/up.out" 2>&1 || fail "dml-local up: $(cat "$tmp/up.out")"
b=$(awk '$1 == "worker2" { print $2 }' "$run/links" 2>/dev/null)
[ -n "$b" ] || fail "no link for worker 2 in $run/links"
! grep -q '^worker1 ' "$run/links" || fail "worker 1 got a link"
ns=$(fleet_link_ns "$b")
host=$(fleet_link_dev "$b" h)
peer=$(fleet_link_dev "$b" n)
fleet_link_ns_exists "$ns" || fail "no namespace $ns"
[ -e "/sys/class/net/$host" ] || fail "no device $host"
ip -n "$ns" link show "$peer" >/dev/null 2>&1 || fail "no device $peer in $ns"
for end in h n; do
	rate=$(fleet_link_rate_of "$b" "$end")
	[ "$rate" = 20Mbit ] || fail "$(fleet_link_dev "$b" "$end") is limited to '${rate:-nothing}'"
done
[ "$(ip netns identify "$(cat "$run/worker2.pid")")" = "$ns" ] ||
	fail "worker 2 (pid $(cat "$run/worker2.pid")) is not in $ns"
[ -z "$(ip netns identify "$(cat "$run/worker1.pid")")" ] || fail "worker 1 is in a namespace"
grep -qx "listen = $(fleet_link_addr "$b" 1):0" "$run/server1.conf" ||
	fail "server 1 does not listen on the link's host end: $(grep listen "$run/server1.conf")"
"${local_[@]}" status --dir "$run" --build "$builddir" >"$tmp/status.out" 2>&1
grep -q "^worker2 .*alive, link 20Mbit (namespace $ns)" "$tmp/status.out" ||
	fail "status: $(cat "$tmp/status.out")"

# BSP, a table of 256 KiB: each clock it crosses the link to the worker (a
# pull) and back (a push), some 10 MiB each way, 4 s at 20 Mbit/s.
clocks=40
keys=65536
printf '%s\n' "[job]" "name = links" "app = lsq" "data = synthetic" "staleness = 0" \
	"batch_size = 8" "max_clocks = $clocks" "examples = 512" "dim = $keys" "[table]" \
	"id = 0" "keys = $keys" "optimizer = sgd" "lr = 0.0001" >"$tmp/job.conf"
local_cluster_dmlctl
timeout 120 "${dmlctl[@]}" submit "$tmp/job.conf" --wait >"$tmp/job.out" 2>&1 ||
	fail "the job: $(tail -n 5 "$tmp/job.out")"
grep -q "done: every worker reached $clocks clocks" "$tmp/job.out" ||
	fail "the job: $(tail -n 5 "$tmp/job.out")"

# Worker 1 beside the server dialed its Unix socket (local_socket is on
# by default), worker 2 in its own namespace TCP on the link (which the
# limits below count).
grep -q "peer unix:pid=[0-9]*: worker 1 joined" "$run/server1.log" ||
	fail "worker 1 did not join server 1 over its Unix socket"
grep -q "peer $(fleet_link_addr "$b" 2):[0-9]*: worker 2 joined" "$run/server1.log" ||
	fail "worker 2 did not join server 1 over TCP from the link's far end"

# The scheduler's estimate of each worker's link (bytes its steps moved
# per second of its own communication): worker 2's near its 20 Mbit/s
# (2.5 MB/s; a push leaves while the next step computes, so a step's bytes
# can take less than their time to cross), worker 1's on loopback far above
# it, or not measured: 40 clocks there may not add up to the 0.05 s of
# communication a measure needs.
"${dmlctl[@]}" --json status 1 >"$tmp/status.json" 2>&1 ||
	fail "dmlctl status: $(cat "$tmp/status.json")"
link_of() { # WORKER
	grep -o "\"worker\":$1,[^}]*" "$tmp/status.json" |
		sed -n 's/.*"link_bps":\([0-9.e+]*\).*/\1/p'
}
link1=$(link_of 1)
link2=$(link_of 2)
awk -v a="${link1:-0}" -v b="${link2:-0}" \
	'BEGIN { exit !(b >= 1.25e6 && b <= 5e6 && (a == 0 || a > 4 * b)) }' ||
	fail "links estimated at ${link1:-?} (loopback) and ${link2:-?} (20 Mbit/s) bytes/s"
least=$((clocks * keys * 4 * 3 / 4))
stats=
for end in h n; do
	dev=$(fleet_link_dev "$b" "$end")
	read -r sent over < <(fleet_link_qdisc "$b" "$end" -s 2>/dev/null |
		sed -n 's/^ Sent \([0-9]*\) bytes.*overlimits \([0-9]*\).*/\1 \2/p')
	[ "${sent:-0}" -ge "$least" ] || fail "$dev sent ${sent:-no} bytes, less than $least"
	[ "${over:-0}" -gt 0 ] || fail "$dev sent $sent bytes and never held one back"
	stats="$stats $dev: $sent bytes, $over frames held back;"
done

"${local_[@]}" down --dir "$run" >"$tmp/down.out" 2>&1 || fail "down: $(cat "$tmp/down.out")"
! fleet_link_ns_exists "$ns" || fail "down left the namespace $ns"
[ ! -e "/sys/class/net/$host" ] || fail "down left the device $host"
[ ! -e "$run/links" ] || fail "down left $run/links"
echo "PASS: worker 2 in $ns behind 20Mbit on both ends, a $clocks-clock BSP job done;$stats" \
	"links estimated at $link1 and $link2 bytes/s; all removed by down and by a failed up"
