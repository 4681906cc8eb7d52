# Unequal machines on one host, for tools/dml-local and the tests: a CPU
# quota per process through the kernel's cgroup cpu controller, so that a
# "slow worker" is really slower (the scheduler throttles it), not told to
# pretend. Sourced by bash; every function returns non-zero and says why on
# stderr when it cannot do its part.
#
#   cgroup v1: ROOT/cpu/GROUP/NAME/cpu.cfs_period_us and cpu.cfs_quota_us
#   cgroup v2: ROOT/GROUP/NAME/cpu.max ("QUOTA PERIOD"), the cpu controller
#              enabled in ROOT's and GROUP's cgroup.subtree_control
#
# Where neither is writable (not root, a container without its own cgroup
# tree) there is no fallback that throttles for real: fleet_controller says
# so and callers refuse the quota rather than run an equal fleet under an
# unequal name.
#
# Must never: touch a cgroup it did not make (every group lives under a
# GROUP named after the caller's run), or leave one behind after
# fleet_remove (it waits for the processes to leave first).

fleet_root=${DML_CGROUP_ROOT:-/sys/fs/cgroup}
# The CFS period: short, so that a slow worker is slow at every step (under
# a quota of 0.15 core in a 100 ms period it ran 15 ms at full speed, then
# stood still for 85, and steps of a millisecond were fast or stalled, not
# slow); longer only where the kernel's 1 ms least quota needs it.
fleet_period_min_us=10000

# Prints "v1 DIR" or "v2 DIR" (DIR: where groups are made), or fails
# saying why none is usable.
fleet_controller() {
	if [ -f "$fleet_root/cpu/cpu.cfs_quota_us" ] && [ -w "$fleet_root/cpu" ]; then
		echo "v1 $fleet_root/cpu"
	elif grep -qw cpu "$fleet_root/cgroup.controllers" 2>/dev/null && [ -w "$fleet_root" ]; then
		echo "v2 $fleet_root"
	else
		echo "no writable cgroup cpu controller: neither $fleet_root/cpu (cgroup v1) nor" \
			"$fleet_root/cgroup.controllers with cpu (v2) can be written here (run" \
			"as root on a host whose cgroups are writable)" >&2
		return 1
	fi
}

# A quota in cores ("0.25", "1.5") as "QUOTA PERIOD" in microseconds; fails
# on anything that is not a decimal of at least 0.01.
fleet_quota_us() { # CORES
	[[ $1 =~ ^[0-9]{1,3}(\.[0-9]{1,6})?$ ]] || return 1
	awk -v c="$1" -v p="$fleet_period_min_us" 'BEGIN {
		if (c < 0.01) exit 1
		if (c * p < 1000) p = int(1000 / c + 0.999)
		print int(c * p + 0.5), p }'
}

fleet_bad_quota() { # TEXT: says why it is not a quota, and fails
	echo "'$1' is not a CPU quota (cores, at least 0.01, e.g. 0.25)" >&2
	return 1
}

# Make GROUP/NAME with a quota of CORES; prints its directory.
fleet_make() { # GROUP NAME CORES
	local ctl kind base dir
	ctl=$(fleet_controller) || return 1
	kind=${ctl%% *}
	base=${ctl#* }
	fleet_quota_us "$3" >/dev/null || fleet_bad_quota "$3" || return 1
	dir=$base/$1/$2
	mkdir -p "$dir" || {
		echo "cannot make the cgroup $dir" >&2
		return 1
	}
	if [ "$kind" = v2 ]; then
		# Controllers pass down one level at a time; an error here means
		# they are on already or the host forbids it, which cpu.max tells.
		echo +cpu >"$base/cgroup.subtree_control" 2>/dev/null
		echo +cpu >"$base/$1/cgroup.subtree_control" 2>/dev/null
	fi
	fleet_set "$dir" "$3" || return 1
	printf '%s\n' "$dir"
}

# Change the quota of DIR (made by fleet_make) to CORES, for processes
# already in it: a machine that slows down in the middle of a job.
fleet_set() { # DIR CORES
	local us
	us=$(fleet_quota_us "$2") || fleet_bad_quota "$2" || return 1
	if [ -f "$1/cpu.cfs_quota_us" ]; then
		# no quota while the period changes: any pair in between is valid
		echo -1 >"$1/cpu.cfs_quota_us" &&
			echo "${us#* }" >"$1/cpu.cfs_period_us" &&
			echo "${us% *}" >"$1/cpu.cfs_quota_us"
	else
		echo "$us" >"$1/cpu.max"
	fi || {
		echo "cannot set the CPU quota of $1" >&2
		return 1
	}
}

# Move process PID (and the children it starts later) into DIR.
fleet_join() { # DIR PID
	echo "$2" >"$1/cgroup.procs" 2>/dev/null || {
		echo "cannot move process $2 into the cgroup $1" >&2
		return 1
	}
}

# The quota of DIR in cores, as the kernel holds it ("max": none).
fleet_quota_of() { # DIR
	local q p
	if [ -f "$1/cpu.cfs_quota_us" ]; then
		q=$(cat "$1/cpu.cfs_quota_us") && p=$(cat "$1/cpu.cfs_period_us") || return 1
		[ "$q" -lt 0 ] && echo max && return 0
	else
		read -r q p <"$1/cpu.max" || return 1
		[ "$q" = max ] && echo max && return 0
	fi
	awk -v q="$q" -v p="$p" 'BEGIN { printf "%.2f\n", q / p }'
}

# Remove every group under GROUP once its processes are gone (waiting up to
# 5 s for them to leave); fails naming a group that stays.
fleet_remove() { # GROUP
	local ctl base d i left
	ctl=$(fleet_controller 2>/dev/null) || return 0
	base=${ctl#* }
	[ -d "$base/$1" ] || return 0
	for ((i = 0; i < 50; i++)); do
		left=0
		for d in "$base/$1"/*/; do
			[ -d "$d" ] || continue
			rmdir "$d" 2>/dev/null || left=1
		done
		[ $left = 0 ] && rmdir "$base/$1" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "cannot remove the cgroup $base/$1 (a process is still in it?)" >&2
	return 1
}
