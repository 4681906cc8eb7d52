# dml-local's emulated network, sourced by dml-local after tools/fleet.sh:
# the links of --links (one per limited worker) and of --zones (one per zone
# after the first, shared by all that zone's workers), made with fleet.sh's
# fleet_link_* and listed in RUNDIR/links as "NAME B" lines, NAME a worker
# ("worker2") or a zone ("zone:B"). With --zones, RUNDIR/zones lists the
# zones in order as "ZONE WORKERS" lines: the first holds the scheduler, the
# servers and its own workers beside them on this host; every other zone's
# workers share one network namespace behind their zone's link. Reads
# dml-local's $dir, $nworkers, $wan, link_list and zone_list.
#
# Must never: leave a link it made out of RUNDIR/links (down finds links
# there alone), or give a daemon a zone that is not in RUNDIR/zones.

# A zone name as the daemons' `zone =` key takes it (proto/conf_check.c).
zone_name_ok() { [[ $1 =~ ^[A-Za-z0-9._-]{1,63}$ ]]; }

# Check --zones LIST ("A:2,B:2") into zone_list ("A 2" entries) and
# zones_total (the workers in all); fails with zones_error saying why.
zones_bad() { zones_error=$*; return 1; }
zones_parse() { # LIST
	local pairs=() p z n seen=" "
	zone_list=()
	zones_total=0
	IFS=, read -r -a pairs <<<"$1"
	[ ${#pairs[@]} -gt 0 ] || zones_bad "an empty list (ZONE:WORKERS pairs, e.g. A:2,B:2)" || return
	for p in "${pairs[@]}"; do
		z=${p%%:*}
		n=${p#*:}
		if [ "$z" = "$p" ] || ! [[ $n =~ ^[0-9]{1,3}$ ]]; then
			zones_bad "'$p' is not ZONE:WORKERS (e.g. A:2)"
			return
		fi
		zone_name_ok "$z" ||
			zones_bad "'$z' is not a zone name (1 to 63 letters, digits, '-', '_', '.')" || return
		[[ $seen != *" $z "* ]] || zones_bad "zone '$z' is given twice" || return
		seen="$seen$z "
		n=$((10#$n))
		# The first zone may be the servers' alone; another one without
		# workers would be a link carrying nothing.
		[ ${#zone_list[@]} -eq 0 ] || [ "$n" -gt 0 ] ||
			zones_bad "zone '$z' has no workers (only the first zone may have none)" || return
		zone_list+=("$z $n")
		zones_total=$((zones_total + n))
	done
	[ "$zones_total" -le 256 ] || zones_bad "$zones_total workers in all, more than 256"
}

# The zone of worker I in RUNDIR/zones; the first zone for any other node
# (I empty); nothing without zones.
zone_of() { # [I]
	[ -f "$dir/zones" ] || return 0
	awk -v i="${1:-0}" 'NR == 1 { first = $1 }
		i > 0 && !found { upto += $2; if (i <= upto) { print $1; found = 1 } }
		END { if (!found) print first }' "$dir/zones"
}

# Worker I's link rate from --links; empty: none.
worker_link() { # I
	local r
	r=$(nth_or_last "$1" "${link_list[@]}")
	[ -z "$r" ] || [ "$r" = 0 ] || printf '%s\n' "$r"
}

# Whether this `up` makes links at all (so it needs root and iproute2).
links_wanted() {
	local i
	[ ${#zone_list[@]} -lt 2 ] || return 0
	for ((i = 1; i <= nworkers; i++)); do
		[ -z "$(worker_link "$i")" ] || return 0
	done
	return 1
}

# The link number of NAME from RUNDIR/links; fails if none.
link_of() { # NAME
	[ -f "$dir/links" ] && awk -v n="$1" '$1 == n { print $2; f = 1 } END { exit !f }' \
		"$dir/links"
}

# The link worker I runs behind: its own (--links) or its zone's (--zones);
# fails if it runs on this host.
worker_link_of() { # I
	local z
	link_of "worker$1" && return 0
	z=$(zone_of "$1") && [ -n "$z" ] && link_of "zone:$z"
}

# Where the scheduler and the servers listen: loopback, or with links the
# host end of the first one (loopback is out of the namespaces' reach).
daemon_host() {
	local b
	if b=$(head -n 1 "$dir/links" 2>/dev/null) && [ -n "$b" ]; then
		fleet_link_addr "${b#* }" 1
	else
		echo 127.0.0.1
	fi
}

# Remove the links in RUNDIR/links, and RUNDIR/zones; the links file goes
# once all did, so that a failed removal can be retried by the next down or
# up.
remove_links() {
	local n b left=0
	rm -f "$dir/zones"
	[ -f "$dir/links" ] || return 0
	while read -r n b; do
		[[ $b =~ ^[0-9]+$ ]] || continue
		fleet_link_remove "$b" || left=1
	done <"$dir/links"
	[ $left = 0 ] || return 1
	rm -f "$dir/links"
}

# Make a link of RATE for NAME and record it in RUNDIR/links at once, so
# that a failure midway leaves nothing that down cannot find.
link_add() { # NAME RATE
	local b
	b=$(fleet_link_make "$dir/$1" "$2") || return 1
	echo "$1 $b" >>"$dir/links" || {
		fleet_link_remove "$b"
		return 1
	}
}

# Write RUNDIR/zones, and make the link of every worker with a rate in
# --links and of every zone after the first.
make_links() {
	local i r z
	rm -f "$dir/zones"
	if [ ${#zone_list[@]} -gt 0 ]; then
		printf '%s\n' "${zone_list[@]}" >"$dir/zones" || return 1
	fi
	for ((i = 1; i < ${#zone_list[@]}; i++)); do
		z=${zone_list[i]%% *}
		link_add "zone:$z" "$wan" || return 1
	done
	for ((i = 1; i <= nworkers; i++)); do
		r=$(worker_link "$i")
		[ -z "$r" ] || link_add "worker$i" "$r" || return 1
	done
}

# The `zone =` line of NAME's config, where there are zones.
zone_line() { # NAME
	local z
	case $1 in
	worker*) z=$(zone_of "${1#worker}") ;;
	aggregator*) z=$(awk -v k="${1#aggregator}" 'NR == k { print $1 }' "$dir/zones" 2>/dev/null) ;;
	*) z=$(zone_of) ;;
	esac
	[ -z "$z" ] || printf 'zone = %s\n' "$z"
}

# ", zone Z, link R (namespace NS)" for NAME, as far as it has either.
link_text() { # NAME
	local b r z
	z=$(zone_line "$1")
	[ -z "$z" ] || printf ', zone %s' "${z#zone = }"
	case $1 in worker*) ;; *) return 0 ;; esac
	b=$(worker_link_of "${1#worker}") && r=$(fleet_link_rate_of "$b" h) &&
		printf ', link %s (namespace %s)' "$r" "$(fleet_link_ns "$b")"
}

# "BYTES PACKETS" link B's end h (into the namespace) or n (out of it) has
# sent, as its tc qdisc counts them.
link_sent() { # B h|n
	fleet_link_qdisc "$1" "$2" -s 2>/dev/null |
		sed -n 's/^ Sent \([0-9]*\) bytes \([0-9]*\) pkt.*/\1 \2/p' | head -n 1 | grep .
}

# One line per zone link: "A B BYTES_AB BYTES_BA PACKETS_AB PACKETS_BA", A
# the first zone.
zone_links() {
	local n b first ab ba
	first=$(zone_of)
	[ -n "$first" ] && [ -f "$dir/links" ] || return 0
	while read -r n b; do
		case $n in zone:*) ;; *) continue ;; esac
		ab=$(link_sent "$b" h) || ab="? ?"
		ba=$(link_sent "$b" n) || ba="? ?"
		printf '%s %s %s %s %s %s\n' "$first" "${n#zone:}" "${ab% *}" "${ba% *}" \
			"${ab#* }" "${ba#* }"
	done <"$dir/links"
}

# `dml-local links`: "A B BYTES_AB BYTES_BA" per zone link.
cmd_links() {
	zone_links | cut -d' ' -f1-4
}

# status's lines for the zone links.
links_status() {
	local a z ab ba pab pba
	zone_links | while read -r a z ab ba pab pba; do
		printf 'link %s-%s: %s->%s %s bytes (%s packets), %s->%s %s bytes (%s packets)\n' \
			"$a" "$z" "$a" "$z" "$ab" "$pab" "$z" "$a" "$ba" "$pba"
	done
}

# ---- aggregators (--aggregators) ---------------------------------------------------

# The number K of the zone worker I is in (1: the first), from RUNDIR/zones.
zone_number_of() { # I
	awk -v i="$1" '{ upto += $2; if (i <= upto) { print NR; exit } }' "$dir/zones"
}

# Start aggregatorK for every zone K after the first: in the zone's
# namespace, on a free port of its loopback (the zone's workers share the
# namespace), forwarding to every server at the address workers dial it
# by, registered with the scheduler SCHED. Fails the whole `up` if one does
# not come up by DEADLINE (SECONDS).
start_aggregators() { # DEADLINE SCHED
	local k i z b ns n port
	agg_servers=
	for ((i = 1; i <= nservers; i++)); do
		wait_port "server$i" "server$i" "$1"
		agg_servers+="${agg_servers:+,}$(daemon_host):$port"
	done
	for ((k = 2; k <= ${#zone_list[@]}; k++)); do
		z=${zone_list[k - 1]%% *}
		n=aggregator$k
		b=$(link_of "zone:$z") || fail_up "zone $z has no link"
		ns=$(fleet_link_ns "$b")
		render aggregator "$n" "$k" "$2" || fail_up "cannot write $n.conf"
		start "$n" "$build/server/dml-aggregator" "" "$ns" || fail_up "$n did not start"
		wait_port "$n" "$n" "$1"
	done
}

# The node ids of the aggregators `up` starts, as alive_ids lists them.
aggregator_ids() {
	local k
	[ -n "${aggregators:-}" ] || return 0
	for ((k = 2; k <= ${#zone_list[@]}; k++)); do printf '%s ' "$k"; done
}
