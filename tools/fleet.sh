# Unequal machines on one host, for tools/dml-local and the tests: a CPU
# quota per process through the kernel's cgroup cpu controller, so that a
# "slow worker" is really slower (the scheduler throttles it), not told to
# pretend; and a network link of its own with a rate limit (the fleet_link_
# functions, below). Sourced by bash; every function returns non-zero and
# says why on stderr when it cannot do its part.
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

# ---- links -----------------------------------------------------------------
#
# A link of its own for a process: a network namespace joined to this host by
# a veth pair, with a tbf rate limit on each end. A qdisc shapes only what
# leaves its device, so the two limits make both directions slow: what the
# process sends leaves through the namespace's end, what it receives through
# the host's. Inside, lo is up and the default route goes to the host end;
# so the process reaches every address of this host but loopback (the kernel
# drops 127.0.0.0/8 arriving from outside lo). Daemons it must reach listen
# on the host end of a link, which every namespace reaches through its own.
#
# Link B (0 <= B < 32768) owns the B-th /30 of 198.18.0.0/15 (RFC 2544's
# range for benchmarking, never routed on the internet): the host end has
# address 4B+1, the namespace's end 4B+2. Names: namespace dml-link-B, host
# end dmlB-h, namespace end dmlB-n. B starts at a hash of the caller's name
# for the link (its run directory and worker), so concurrent runs start far
# apart, and moves on past a B whose namespace or device exists or whose /30
# already holds an address here. Making the namespace is the claim: `ip
# netns add` of an existing name fails, so two runs that race for one B do
# not share it. There is no emulated latency: this kernel has no netem.
#
# Must never: remove a link it was not given the number of, or leave a
# namespace, a device or a qdisc behind after fleet_link_remove.

fleet_link_count=32768
# The qdisc's bucket: 10 ms at the link's rate, so that a burst is short next
# to any transfer worth measuring, but at least 16 KiB (a few full frames):
# tbf drops a frame larger than its bucket, and at 1mbit 10 ms is less than
# one frame of 1514 bytes.
fleet_link_burst_ms=10
fleet_link_burst_min=16384

# Fails saying why links cannot be made here.
fleet_link_check() {
	if ! command -v ip >/dev/null 2>&1; then
		echo "no 'ip' command (iproute2): network namespaces cannot be made here" >&2
	elif ! command -v tc >/dev/null 2>&1; then
		echo "no 'tc' command (iproute2): links cannot be rate-limited here" >&2
	elif [ "$(id -u)" != 0 ]; then
		echo "network namespaces and veth pairs need root (this is uid $(id -u))" >&2
	elif ! ip netns list >/dev/null 2>&1; then
		echo "'ip netns' does not work here: $(ip netns list 2>&1 | head -n 1)" >&2
	else
		return 0
	fi
	return 1
}

# A rate as tc takes it ("100mbit", "1.5gbit", "500kbit", any case) in
# bits per second; fails on anything else, and below 8 kbit (1 KB/s), where
# a single frame of a few KB takes longer than the cluster's failure
# detection allows a heartbeat.
fleet_link_bits() { # RATE
	local r=${1,,}
	[[ $r =~ ^([0-9]{1,6}(\.[0-9]{1,3})?)(bit|kbit|mbit|gbit|tbit)$ ]] || return 1
	awk -v n="${BASH_REMATCH[1]}" -v u="${BASH_REMATCH[3]}" 'BEGIN {
		m["bit"] = 1; m["kbit"] = 1e3; m["mbit"] = 1e6; m["gbit"] = 1e9; m["tbit"] = 1e12
		b = n * m[u]
		if (b < 8000) exit 1
		printf "%.0f\n", b }'
}

fleet_bad_rate() { # TEXT: says why it is not a rate, and fails
	echo "'$1' is not a link rate (a number and bit, kbit, mbit, gbit or tbit;" \
		"at least 8kbit; e.g. 100mbit)" >&2
	return 1
}

fleet_link_ns() { printf 'dml-link-%s\n' "$1"; } # B
fleet_link_dev() { printf 'dml%s-%s\n' "$1" "$2"; } # B h|n

# An address of link B's /30: its network (0), host end (1) or namespace
# end (2).
fleet_link_addr() { # B 0|1|2
	local a=$(($1 * 4 + $2))
	printf '198.%d.%d.%d\n' $((18 + a / 65536)) $((a / 256 % 256)) $((a % 256))
}

fleet_link_ns_exists() { # NAMESPACE
	ip netns list 2>/dev/null | awk -v n="$1" '$1 == n { f = 1 } END { exit !f }'
}

# Run COMMAND; when it fails, say "cannot WHAT: " and its error.
fleet_link_do() { # WHAT COMMAND...
	local what=$1 err
	shift
	err=$("$@" 2>&1 >/dev/null) && return 0
	echo "cannot $what: ${err:-$1 failed}" >&2
	return 1
}

# Give link B, whose namespace exists, its pair, addresses, routes and rate.
fleet_link_setup() { # B BITS
	local ns host peer gw burst
	ns=$(fleet_link_ns "$1")
	host=$(fleet_link_dev "$1" h)
	peer=$(fleet_link_dev "$1" n)
	gw=$(fleet_link_addr "$1" 1)
	burst=$(awk -v b="$2" -v ms="$fleet_link_burst_ms" -v min="$fleet_link_burst_min" \
		'BEGIN { v = int(b / 8 * ms / 1000); print (v < min ? min : v) }')
	fleet_link_do "make the veth pair $host/$peer" \
		ip link add "$host" type veth peer name "$peer" netns "$ns" &&
		fleet_link_do "address $host" ip addr add "$gw/30" dev "$host" &&
		fleet_link_do "bring $host up" ip link set "$host" up &&
		fleet_link_do "bring lo up in $ns" ip -n "$ns" link set lo up &&
		fleet_link_do "address $peer in $ns" \
			ip -n "$ns" addr add "$(fleet_link_addr "$1" 2)/30" dev "$peer" &&
		fleet_link_do "bring $peer up in $ns" ip -n "$ns" link set "$peer" up &&
		fleet_link_do "route $ns through $gw" ip -n "$ns" route add default via "$gw" &&
		fleet_link_do "limit $host to $2 bit/s (tc tbf)" tc qdisc add dev "$host" \
			root tbf rate "${2}bit" burst "$burst" latency 50ms &&
		fleet_link_do "limit $peer to $2 bit/s (tc tbf)" tc -n "$ns" qdisc add \
			dev "$peer" root tbf rate "${2}bit" burst "$burst" latency 50ms
}

# Make a link of RATE for NAME (see above); prints its number B.
fleet_link_make() { # NAME RATE
	local bits b i ns err
	bits=$(fleet_link_bits "$2") || fleet_bad_rate "$2" || return 1
	fleet_link_check || return 1
	b=$(($(printf '%s' "$1" | cksum | cut -d' ' -f1) % fleet_link_count))
	for ((i = 0; i < 64; i++, b = (b + 1) % fleet_link_count)); do
		ns=$(fleet_link_ns "$b")
		if fleet_link_ns_exists "$ns" || [ -e "/sys/class/net/$(fleet_link_dev "$b" h)" ] ||
			[ -n "$(ip -o -4 addr show to "$(fleet_link_addr "$b" 0)/30")" ]; then
			continue
		fi
		if ! err=$(ip netns add "$ns" 2>&1); then
			fleet_link_ns_exists "$ns" && continue # another run was quicker
			echo "cannot make the network namespace $ns: $err" >&2
			return 1
		fi
		if ! fleet_link_setup "$b" "$bits"; then
			fleet_link_remove "$b"
			return 1
		fi
		printf '%s\n' "$b"
		return 0
	done
	echo "no free link for $1: 64 in a row from $(fleet_link_ns "$b") are taken" >&2
	return 1
}

# `tc [OPTION] qdisc show` for link B's host end (h) or namespace end (n).
fleet_link_qdisc() { # B h|n [OPTION]
	local dev in_ns=()
	dev=$(fleet_link_dev "$1" "$2")
	[ "$2" = h ] || in_ns=(-n "$(fleet_link_ns "$1")")
	tc "${in_ns[@]}" ${3:+"$3"} qdisc show dev "$dev"
}

# The rate of the tbf qdisc on link B's end h or n, as tc prints it
# ("20Mbit"); fails where there is none.
fleet_link_rate_of() { # B h|n
	fleet_link_qdisc "$1" "$2" 2>/dev/null | sed -n 's/^qdisc tbf .* rate \([^ ]*\) .*/\1/p' | grep .
}

# Remove link B: its pair (which takes both ends and their qdiscs) and its
# namespace; fails naming what stays.
fleet_link_remove() { # B
	local ns host
	ns=$(fleet_link_ns "$1")
	host=$(fleet_link_dev "$1" h)
	# The pair goes first and at once: a namespace dies asynchronously once
	# its last process has left, and its end of the pair with it.
	[ ! -e "/sys/class/net/$host" ] || ip link del "$host" 2>/dev/null
	! fleet_link_ns_exists "$ns" || ip netns del "$ns" 2>/dev/null
	if [ -e "/sys/class/net/$host" ]; then
		echo "cannot remove the veth pair $host" >&2
		return 1
	fi
	if fleet_link_ns_exists "$ns"; then
		echo "cannot remove the network namespace $ns" >&2
		return 1
	fi
}
