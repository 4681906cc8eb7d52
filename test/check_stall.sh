#!/usr/bin/env bash
# A worker that hangs under BSP: SIGSTOP leaves its process and its TCP
# connections in place and answers nothing, so the servers alone would wait
# for its clock for ever. The scheduler loses it after dead_after_ms (no
# heartbeat), hands its partitions on and tells the servers to drop its
# clock (EVICT): the other workers go on. After SIGCONT it reconnects,
# rejoins with partitions of its own and takes up at the job's clock
# instead of walking every clock it missed. Exit status: 0 pass, 1 fail.
set -u

stopped=
# A stopped process would not go down.
before_cleanup() {
	[ -z "$stopped" ] || kill -CONT "$stopped" 2>/dev/null
}
. "${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/test/local_cluster.sh" stall

"${local_[@]}" up --dir "$run" --build "$builddir" --servers 2 --workers 3 \
	>"$tmp/up.out" 2>&1 || fail "dml-local up: $(cat "$tmp/up.out")"
local_cluster_dmlctl
local_cluster_lsq hang 256 0.01 "staleness = 0" "batch_size = 64" \
	"max_clocks = 100000000" "examples = 5000"

status() { "${dmlctl[@]}" status 1 >"$tmp/job.out" 2>&1; }
# Field f of worker id's row: 2 state, 3 clock, 7 partitions.
worker_field() { awk -v id="$1" -v f="$2" '$1 == id && NF > 8 { print $f }' "$tmp/job.out"; }
job_clock() { sed -n 's/.*progress: clock \([0-9]*\)\/.*/\1/p' "$tmp/job.out"; }
# Poll the status until the condition holds; fail with what after 60 s.
wait_for() {
	local what=$1
	shift
	for ((i = 0; i < 300; i++)); do
		status
		"$@" && return 0
		sleep 0.2
	done
	fail "$what after 60 s: $(cat "$tmp/job.out")"
}
clock_of_3_above() { [ "$(worker_field 3 3)" -ge "$1" ] 2>/dev/null; }
job_clock_above() { [ "$(job_clock)" -ge "$1" ] 2>/dev/null; }
state_of_3_is() { [ "$(worker_field 3 2)" = "$1" ]; }
back_with_partitions() { state_of_3_is alive && [ "$(worker_field 3 7)" -ge 1 ] 2>/dev/null; }

wait_for "worker 3 never reached clock 50" clock_of_3_above 50
stopped=$(cat "$run/worker3.pid")
kill -STOP "$stopped" || fail "cannot stop worker 3"
wait_for "worker 3 was not lost" state_of_3_is dead
lost_at=$(job_clock)
# Without the servers dropping its clock the job would stand still here.
wait_for "the job stood still at clock $lost_at without worker 3" \
	job_clock_above $((lost_at + 500))
for s in server1 server2; do
	grep -q "job 1: the scheduler lost worker 3 at clock [0-9]*: dropped from the clock set" \
		"$run/$s.log" || fail "$s did not drop worker 3: $(tail -n 5 "$run/$s.log")"
done
resumed_at=$(job_clock)
kill -CONT "$stopped"
stopped=
wait_for "worker 3 did not rejoin with partitions" back_with_partitions
took_up() { grep -q "job 1: the job went on without this worker: clock [0-9]* -> [0-9]*" \
	"$run/worker3.log"; }
for ((i = 0; i < 100; i++)); do
	took_up && break
	sleep 0.2
done
took_up || fail "worker 3 did not take up at the job's clock: $(tail -n 5 "$run/worker3.log")"
jumped=$(sed -n 's/.*went on without this worker: clock [0-9]* -> \([0-9]*\)$/\1/p' \
	"$run/worker3.log" | tail -n 1)
[ "$jumped" -ge "$resumed_at" ] ||
	fail "worker 3 took up at clock $jumped, before the job's $resumed_at"
# And the job goes on with it.
wait_for "worker 3 did not go on past clock $jumped" clock_of_3_above $((jumped + 500))
"${dmlctl[@]}" stop 1 >/dev/null 2>&1 || fail "dmlctl stop 1"
echo "check_stall: worker 3 lost at job clock $lost_at; taken up at clock $jumped" \
	"(the job was at $resumed_at when it resumed)"
exit 0
