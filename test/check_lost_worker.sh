#!/usr/bin/env bash
# Two ways a job used to hang for ever, and the worker with it:
#  1. A worker lost before it ever joined the servers (SIGSTOP right after
#     submit, so it holds its assignment but never connects). The servers
#     waited for the clock set's expected count; now EVICT enters it as
#     gone and the other worker trains the job to its end.
#  2. A worker asked to stop (SIGTERM) while a pull waits on a server that
#     answers nothing (SIGSTOP): it used to wait for the clock boundary
#     for ever; now it interrupts its waits after a grace and exits. Before
#     that, `dmlctl status` says the job waits on that server.
# Exit status: 0 pass, 1 fail.
set -u

stopped=()
before_cleanup() {
	local p
	for p in "${stopped[@]}"; do
		kill -CONT "$p" 2>/dev/null
	done
}
. "${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}/test/local_cluster.sh" lost

"${local_[@]}" up --dir "$run" --build "$builddir" --servers 1 --workers 2 \
	>"$tmp/up.out" 2>&1 || fail "dml-local up: $(cat "$tmp/up.out")"
local_cluster_dmlctl

status() { "${dmlctl[@]}" status "$1" >"$tmp/job.out" 2>&1; }
# Poll job $2's status until "$3..." holds; fail with what after 120 s.
wait_for() {
	local what=$1 job=$2
	shift 2
	for ((i = 0; i < 600; i++)); do
		status "$job"
		"$@" && return 0
		sleep 0.2
	done
	fail "$what after 120 s: $(cat "$tmp/job.out")"
}
job_done() { grep -q "^job [0-9]* ([a-z]*): done" "$tmp/job.out"; }
started_on_both() { grep -q "started on workers 1, 2" "$tmp/job.out"; }

# 1. Worker 2 holds its share of job 1 but never reaches the servers.
w2=$(cat "$run/worker2.pid")
kill -STOP "$w2" || fail "cannot stop worker 2"
stopped+=("$w2")
local_cluster_lsq early 64 0.01 "staleness = 0" "batch_size = 32" "max_clocks = 200" \
	"examples = 2000"
status 1
if started_on_both; then
	wait_for "job 1 did not finish without worker 2" 1 job_done
	grep -q "the scheduler lost worker 2 before it joined here" "$run/server1.log" ||
		fail "server 1 did not enter worker 2 as gone: $(tail -n 5 "$run/server1.log")"
	echo "check_lost_worker: a worker lost before it joined: the job went on to its end"
else
	# The scheduler had already lost it: nothing was assigned to it.
	echo "check_lost_worker: worker 2 was lost before the assignment; part 1 not exercised"
fi

# 2. Worker 1 in a pull that server 1 never answers, then told to stop.
w1=$(cat "$run/worker1.pid")
local_cluster_lsq wait 64 0.01 "staleness = 0" "batch_size = 32" \
	"max_clocks = 100000000" "examples = 2000"
wait_for "job 2 never ran" 2 grep -q "progress: clock [1-9]" "$tmp/job.out"
s1=$(cat "$run/server1.pid")
kill -STOP "$s1" || fail "cannot stop server 1"
stopped+=("$s1")
# What an operator sees: the job waits on the server, whatever its workers do.
wait_for "job 2 did not say it waits on server 1" 2 \
	grep -q "running: waiting on server 1 (" "$tmp/job.out"
kill -TERM "$w1"
for ((i = 0; i < 300; i++)); do
	kill -0 "$w1" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$w1" 2>/dev/null &&
	fail "worker 1 still runs 30 s after SIGTERM: $(tail -n 5 "$run/worker1.log")"
grep -q "interrupting its waits" "$run/worker1.log" ||
	fail "worker 1 ended without interrupting its wait: $(tail -n 5 "$run/worker1.log")"
grep -q "job 2 failed" "$run/worker1.log" &&
	fail "worker 1 failed job 2 on the way out: $(tail -n 5 "$run/worker1.log")"
echo "check_lost_worker: a worker stopped while its pull waited on a silent server left"
exit 0
