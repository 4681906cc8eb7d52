#!/usr/bin/env bash
# Emulated zones (tools/netns.sh, dml-local --zones): with --zones A:1,B:1
# --wan 100mbit the scheduler, the server and zone A's worker run on this
# host and zone B's worker in a network namespace of its own behind a veth
# pair limited on both ends; dmlctl lists each worker alive in its zone,
# zone B's worker reaches the server from the link's far end, a BSP job
# through the link makes `dml-local links` count more bytes both ways,
# about half as many with the default cross-zone codec (fp16) as without,
# `dmlctl status` counts zone B's values across zones (as floats, then in
# fp16 at half their floats' bytes) and zone A's within as floats, with a
# worker per zone, and `down` removes the namespace and the pair. Bad
# --zones/--wan combinations are refused before anything starts. Needs
# root and iproute2; skips otherwise. Exit status: 0 pass, 1 fail, 77 skip.
set -u

. "${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/test/local_cluster.sh" zones
. "$srcdir/tools/fleet.sh"

# Refused before anything starts, root or not: each with its reason.
refused() { # WHAT-IT-SAYS ARGUMENT...
	local says=$1 rc
	shift
	"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 "$@" >"$tmp/bad.out" 2>&1
	rc=$?
	[ $rc = 2 ] || fail "up $*: exit $rc, not 2"
	grep -q -- "$says" "$tmp/bad.out" || fail "up $*: $(cat "$tmp/bad.out")"
	[ ! -e "$run/sched.pid" ] || fail "up $* started the scheduler"
}
refused "needs --wan" --zones A:1,B:1
refused "not go together" --zones A:1,B:1 --wan 100mbit --links 1gbit
refused "'fast' is not a link rate" --zones A:1,B:1 --wan fast
refused "is not a zone name" --zones "A:1,B c:1" --wan 100mbit
refused "disagree" --zones A:1,B:1 --wan 100mbit --workers 3
refused "given twice" --zones A:1,A:1 --wan 100mbit

if ! why=$(fleet_link_check 2>&1); then
	echo "SKIP: $why"
	exit 77
fi

"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 --zones A:1,B:1 --wan 100mbit \
	>"$tmp/up.out" 2>&1 || fail "dml-local up: $(cat "$tmp/up.out")"
b=$(awk '$1 == "zone:B" { print $2 }' "$run/links" 2>/dev/null)
[ -n "$b" ] || fail "no link for zone B in $run/links"
[ "$(wc -l <"$run/links")" = 1 ] || fail "links other than zone B's: $(cat "$run/links")"
ns=$(fleet_link_ns "$b")
host=$(fleet_link_dev "$b" h)
for end in h n; do
	rate=$(fleet_link_rate_of "$b" "$end")
	[ "$rate" = 100Mbit ] || fail "$(fleet_link_dev "$b" "$end") is limited to '${rate:-nothing}'"
done
[ "$(ip netns identify "$(cat "$run/worker2.pid")")" = "$ns" ] || fail "worker 2 is not in $ns"
[ -z "$(ip netns identify "$(cat "$run/worker1.pid")")" ] || fail "worker 1 is in a namespace"
grep -qx "zone = A" "$run/server1.conf" || fail "server 1 is not in zone A"
! grep -q "^zone" "$run/sched.conf" || fail "dml-sched was given a zone key"

# The scheduler lists each worker alive in its zone.
local_cluster_dmlctl
"${dmlctl[@]}" --json nodes >"$tmp/nodes.json" 2>&1 || fail "dmlctl nodes: $(cat "$tmp/nodes.json")"
node_zone() { # ROLE ID
	tr '{' '\n' <"$tmp/nodes.json" | grep "\"role\":\"$1\"" | grep "\"id\":$2," |
		grep '"state":"alive"' | sed -n 's/.*"zone":"\([^"]*\)".*/\1/p'
}
[ "$(node_zone worker 1)" = A ] || fail "worker 1 not alive in zone A: $(cat "$tmp/nodes.json")"
[ "$(node_zone worker 2)" = B ] || fail "worker 2 not alive in zone B: $(cat "$tmp/nodes.json")"
[ "$(node_zone server 1)" = A ] || fail "server 1 not alive in zone A: $(cat "$tmp/nodes.json")"

"${local_[@]}" links --dir "$run" >"$tmp/links0.out" 2>&1 || fail "links: $(cat "$tmp/links0.out")"
[[ $(cat "$tmp/links0.out") =~ ^A\ B\ ([0-9]+)\ ([0-9]+)$ ]] || fail "links: $(cat "$tmp/links0.out")"
ab0=${BASH_REMATCH[1]}
ba0=${BASH_REMATCH[2]}

# BSP, a table of 64 KiB: each clock crosses the link both ways. Run
# twice: with floats on the link, then with the job's default cross-zone
# codec (fp16 pushes and pull replies), which must halve what crosses.
clocks=20
keys=16384
zone_job() { # NAME [--table LINE...]
	local name=$1
	shift
	local_cluster_lsq --wait "$name" "$keys" 0.0001 "staleness = 0" "batch_size = 8" \
		"max_clocks = $clocks" "examples = 256" "$@"
	grep -q "done: every worker reached $clocks clocks" "$tmp/submit.out" ||
		fail "the job $name: $(tail -n 5 "$tmp/submit.out")"
}
# A job's status: zone B's worker's values crossed the link, zone A's
# stayed within as floats, and each zone has its worker. Sets cross and
# sent: the job's bytes across zones as floats and as sent (its own
# figures come last in its object).
job_num() { # KEY: the last number of that name in $tmp/status.json
	sed -n "s/.*\"$1\":\([0-9]*\).*/\1/p" "$tmp/status.json"
}
job_traffic() { # JOB
	"${dmlctl[@]}" --json status "$1" >"$tmp/status.json" 2>&1 ||
		fail "status $1: $(cat "$tmp/status.json")"
	cross=$(job_num cross_zone_float_bytes)
	sent=$(job_num cross_zone_sent_bytes)
	[ "${cross:-0}" -ge $((clocks * keys * 4)) ] ||
		fail "job $1 across zones: ${cross:-?} bytes as floats"
	[ "$(job_num within_zone_float_bytes)" = "$(job_num within_zone_sent_bytes)" ] ||
		fail "job $1 within zone: not sent as floats: $(cat "$tmp/status.json")"
	for z in A B; do
		grep -q "{\"zone\":\"$z\",\"workers\":1," "$tmp/status.json" ||
			fail "job $1 has no zone $z of one worker: $(cat "$tmp/status.json")"
	done
}
link_bytes
ab0=$ab ba0=$ba
zone_job floats --table "codec_cross_zone = none" "pull_codec_cross_zone = none"
link_bytes
ab1=$ab ba1=$ba
job_traffic 1
[ "$sent" = "$cross" ] || fail "job 1 without codecs: $cross bytes as floats, $sent sent"

# Zone B's worker reached the server from its link's far end.
grep -q "peer $(fleet_link_addr "$b" 2):[0-9]*: worker 2 joined" "$run/server1.log" ||
	fail "worker 2 did not join server 1 from $(fleet_link_addr "$b" 2)"

least=$((clocks * keys * 4))
[ $((ab1 - ab0)) -ge "$least" ] || fail "A->B grew by $((ab1 - ab0)) bytes, less than $least"
[ $((ba1 - ba0)) -ge "$least" ] || fail "B->A grew by $((ba1 - ba0)) bytes, less than $least"
zone_job fp16
link_bytes
ab2=$ab ba2=$ba
job_traffic 2
[ $((sent * 2)) = "$cross" ] || fail "job 2 in fp16: $cross bytes as floats, $sent sent"
for dir in ab ba; do
	flat=$(( ${dir}1 - ${dir}0 )) coded=$(( ${dir}2 - ${dir}1 ))
	[ $((coded * 4)) -lt $((flat * 3)) ] ||
		fail "$dir: $coded bytes with fp16 on the link, $flat with floats: not compressed"
	[ $((coded * 2)) -ge $((flat * 4 / 5)) ] ||
		fail "$dir: $coded bytes with fp16 on the link, $flat with floats: less than half"
done
"${local_[@]}" status --dir "$run" --build "$builddir" >"$tmp/status.out" 2>&1 ||
	fail "status: $(cat "$tmp/status.out")"
grep -q "^link A-B: A->B [0-9]* bytes ([0-9]* packets), B->A [0-9]* bytes" "$tmp/status.out" ||
	fail "status has no link line: $(cat "$tmp/status.out")"
grep -q "^worker2 .*alive, zone B, link 100Mbit (namespace $ns)" "$tmp/status.out" ||
	fail "status: $(cat "$tmp/status.out")"

"${local_[@]}" down --dir "$run" >"$tmp/down.out" 2>&1 || fail "down: $(cat "$tmp/down.out")"
! ip netns list | grep -q "^$ns\b" || fail "down left the namespace $ns"
[ ! -e "/sys/class/net/$host" ] || fail "down left the device $host"
[ ! -e "$run/links" ] || fail "down left $run/links"
echo "PASS: zone B's worker in $ns behind 100Mbit both ways, each worker alive in its zone," \
	"a $clocks-clock BSP job moved $((ab1 - ab0)) bytes A->B and $((ba1 - ba0)) B->A as" \
	"floats, $((ab2 - ab1)) and $((ba2 - ba1)) in fp16; all removed by down"
