#!/usr/bin/env bash
# Zone aggregators on an emulated two-zone fleet (dml-local --zones A:1,B:2
# --wan 100mbit): the same BSP job at full precision runs flat (every
# worker straight to the server in zone A), then with --aggregators (zone
# B's two workers push and pull through a dml-aggregator in their zone's
# namespace). With the aggregator the link carries at most 0.7 x the flat
# bytes each way (zone B's two pushes of a clock go across as one, and its
# two pulls as one), the aggregator forwarded pushes that summed both
# workers, and sent fewer pulls up than it got; the scheduler has its
# counters (dmlctl --json nodes) and dmlctl status shows them. Then the
# aggregator is killed in the middle of a job: zone B's workers go straight
# to the server and the job completes. Needs root and iproute2; skips otherwise.
# Exit status: 0 pass, 1 fail, 77 skip.
set -u

. "${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/test/local_cluster.sh" zone-aggregators
. "$srcdir/tools/fleet.sh"

"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 --aggregators \
	>"$tmp/bad.out" 2>&1
[ $? = 2 ] && grep -q "needs --zones" "$tmp/bad.out" ||
	fail "--aggregators without zones: $(cat "$tmp/bad.out")"

if ! why=$(fleet_link_check 2>&1); then
	echo "SKIP: $why"
	exit 77
fi

clocks=20
keys=16384
zone_job() { # NAME CLOCKS: a BSP job at full precision across the zones
	local_cluster_lsq --wait "$1" "$keys" 0.0001 "staleness = 0" "batch_size = 8" \
		"max_clocks = $2" "examples = 256" --table "codec_cross_zone = none" \
		"pull_codec_cross_zone = none"
	grep -q "done: every worker reached $2 clocks" "$tmp/submit.out" ||
		fail "the job $1: $(tail -n 5 "$tmp/submit.out")"
}
cluster_up() { # ARGUMENT...
	"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 --zones A:1,B:2 \
		--wan 100mbit "$@" >"$tmp/up.out" 2>&1 || fail "dml-local up $*: $(cat "$tmp/up.out")"
	local_cluster_dmlctl
}
cluster_down() {
	"${local_[@]}" down --dir "$run" >"$tmp/down.out" 2>&1 || fail "down: $(cat "$tmp/down.out")"
}
# The value of an aggregator metric (the sum over its labels).
agg_metric() { # NAME
	awk -v n="$1" '$1 == n || index($1, n "{") == 1 { s += $2 } END { print s + 0 }' \
		"$tmp/metrics.out"
}

# Flat: every worker straight to the server.
cluster_up
link_bytes
ab0=$ab ba0=$ba
zone_job flat $clocks
link_bytes
flat_ab=$((ab - ab0)) flat_ba=$((ba - ba0))
cluster_down

# Through zone B's aggregator.
cluster_up --aggregators
[ -s "$run/aggregator2.port" ] || fail "no aggregator for zone B: $(ls "$run")"
[ ! -e "$run/aggregator1.pid" ] || fail "zone A (the servers' zone) got an aggregator"
b=$(awk '$1 == "zone:B" { print $2 }' "$run/links")
ns=$(fleet_link_ns "$b")
[ "$(ip netns identify "$(cat "$run/aggregator2.pid")")" = "$ns" ] ||
	fail "the aggregator is not in zone B's namespace $ns"
"${dmlctl[@]}" --json nodes >"$tmp/nodes.json" 2>&1 || fail "nodes: $(cat "$tmp/nodes.json")"
tr '{' '\n' <"$tmp/nodes.json" | grep '"role":"aggregator"' | grep '"id":2,' |
	grep '"state":"alive"' | grep -q '"zone":"B"' ||
	fail "the aggregator is not alive in zone B: $(cat "$tmp/nodes.json")"
link_bytes
ab0=$ab ba0=$ba
zone_job aggregated $clocks
link_bytes
agg_ab=$((ab - ab0)) agg_ba=$((ba - ba0))
for dir in ab ba; do
	flat=$((flat_$dir)) agg=$((agg_$dir))
	[ $((agg * 10)) -le $((flat * 7)) ] ||
		fail "$dir: $agg bytes through the aggregator, $flat flat: more than 0.7 x"
done
mport=$(cat "$run/aggregator2.metrics.port" 2>/dev/null)
[ -n "$mport" ] || fail "the aggregator wrote no metrics port file"
# GET /metrics from inside the zone's namespace, where it listens.
ip netns exec "$ns" bash -c 'exec 3<>"/dev/tcp/127.0.0.1/$1" &&
	printf "GET /metrics HTTP/1.0\r\n\r\n" >&3 && cat <&3' _ "$mport" >"$tmp/metrics.out" ||
	fail "the aggregator's metrics did not answer"
[ "$(agg_metric dml_aggregator_fanin_sum)" -gt "$(agg_metric dml_aggregator_fanin_count)" ] ||
	fail "no forwarded push summed two workers: $(grep ^dml_aggregator "$tmp/metrics.out")"
# Both workers pull the model each clock: one upstream pull serves both
# (from the cache, or joined to the one in flight).
[ "$(agg_metric dml_aggregator_pulls_forwarded_total)" -lt \
	"$(agg_metric dml_aggregator_pulls_in_total)" ] ||
	fail "no pull was shared: $(grep ^dml_aggregator "$tmp/metrics.out")"

# The scheduler has its counters from its heartbeats.
"${dmlctl[@]}" --json nodes >"$tmp/nodes.json" 2>&1 || fail "nodes: $(cat "$tmp/nodes.json")"
grep -q '"aggregator":{"pushes_in":[1-9][0-9]*,"pushes_forwarded":[1-9]' "$tmp/nodes.json" ||
	fail "no aggregator counters in nodes: $(cat "$tmp/nodes.json")"

# Kill the aggregator in the middle of a job: its workers go straight to
# the server, and the job completes.
long=3000
local_cluster_lsq "killed" "$keys" 0.0001 "staleness = 0" "batch_size = 8" \
	"max_clocks = $long" "examples = 256" --table "codec_cross_zone = none" \
	"pull_codec_cross_zone = none"
job=$(sed -n 's/^submitted job \([0-9]*\).*/\1/p' "$tmp/submit.out")
[ -n "$job" ] || fail "no job id: $(cat "$tmp/submit.out")"
# The job's state and clock from `dmlctl status JOB`: "STATE CLOCK".
job_now() {
	"${dmlctl[@]}" status "$job" >"$tmp/status.out" 2>&1 || fail "status $job: $(cat "$tmp/status.out")"
	state=$(sed -n "1s/^job $job ([^)]*): \([a-z]*\):.*/\1/p" "$tmp/status.out")
	c=$(sed -n 's/^  progress: clock \([0-9]*\)\/.*/\1/p' "$tmp/status.out")
	c=${c:-0}
}
c=0
for ((i = 0; i < 6000 && c < 5; i++)); do
	job_now
	case $state in
	running | pending) [ "$c" -ge 5 ] || sleep 0.05 ;;
	*) fail "the job is not running: $(cat "$tmp/status.out")" ;;
	esac
done
[ "$c" -ge 5 ] || fail "the job did not reach clock 5: $(cat "$tmp/status.out")"
# The status shows what the aggregator its zone B workers route through
# summed and sent (its heartbeats' counters, the earlier job's included).
grep -q "^  aggregator:   B #2 fan-in [0-9.]*; sums .* as floats, .* sent" "$tmp/status.out" ||
	fail "status shows no aggregator counters: $(cat "$tmp/status.out")"
kill -KILL "$(cat "$run/aggregator2.pid")" || fail "cannot kill the aggregator"
at=$c
for ((i = 0; i < 6000; i++)); do
	job_now
	case $state in
	done) break ;;
	running | pending) sleep 0.05 ;;
	*) fail "the job without its aggregator: $(cat "$tmp/status.out")" ;;
	esac
done
[ "$state" = done ] || fail "the job did not end without its aggregator: $(cat "$tmp/status.out")"
grep -q "every worker reached $long clocks" "$tmp/status.out" ||
	fail "the job without its aggregator: $(cat "$tmp/status.out")"
"${local_[@]}" down --dir "$run" >"$tmp/down.out" 2>&1 # the aggregator's exit is ours
! ip netns list | grep -q "^$ns\b" || fail "down left the namespace $ns"

echo "PASS: a $clocks-clock BSP job moved $flat_ab bytes A->B and $flat_ba B->A flat," \
	"$agg_ab and $agg_ba through zone B's aggregator; a job whose aggregator was killed" \
	"at clock $at went on straight to the server and completed"
