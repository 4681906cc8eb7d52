#!/usr/bin/env bash
# Checks the systemd units in conf/systemd with systemd-analyze: dml-sched,
# dml-server@ and dml-worker@. For each, `verify` must pass with no warning
# about the unit, and where this systemd can rate units offline, the
# hardening must keep the exposure level at 2.0 or below.
# verify needs ExecStart to exist, so it runs on a copy whose ExecStart points
# at the binary of this build. Never touches the running system's units.
# Exit status: 0 pass, 1 fail, 77 skip (no systemd-analyze).
set -u

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: systemd-analyze not found (Debian package systemd)"
	exit 77
fi

srcdir=${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=${DML_BUILDDIR:-.}
# --threshold scores exposure 0..100; systemd prints it as 0.0..10.0.
max_exposure=20
max_shown=$((max_exposure / 10)).$((max_exposure % 10))

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

tmp=$(mktemp -d -t dml-units.XXXXXX) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT

verify_opts=(--man=no)
if systemd-analyze --help 2>&1 | grep -q -- --recursive-errors; then
	# Only our units count; the host's own targets are not under test.
	verify_opts+=(--recursive-errors=no)
fi
can_rate=0
systemd-analyze --help 2>&1 | grep -q -- --offline && can_rate=1

# check_unit UNIT BINARY INSTANCE: UNIT in conf/systemd runs BINARY (relative
# to the build directory, installed under /usr/local/bin); INSTANCE is the
# unit name verified (an instance of a template, or the unit itself).
check_unit() {
	local unit_name=$1 bin_rel=$2 instance_name=$3
	local unit=$srcdir/conf/systemd/$unit_name bin=$builddir/$bin_rel
	local installed_exec=/usr/local/bin/${bin_rel##*/} dir line rest nexec=0 out rc level

	[ -f "$unit" ] || fail "$unit is missing"
	[ -x "$bin" ] || fail "$bin is not built (needed to verify $unit_name)"
	bin=$(cd "$(dirname "$bin")" && pwd)/${bin_rel##*/}
	case $bin in
	*'"'* | *\\*) fail "cannot quote the build path in ExecStart: $bin" ;;
	esac

	# Copy the unit with the installed binary replaced by the built one; '%'
	# starts a specifier in unit files, so the path doubles it. Each unit gets
	# a directory of its own, so verify sees only that unit.
	dir=$tmp/${unit_name%%.service}
	mkdir -p "$dir" || fail "mkdir $dir"
	while IFS= read -r line || [ -n "$line" ]; do
		case $line in
		ExecStart=*)
			nexec=$((nexec + 1))
			rest=${line#"ExecStart=$installed_exec"}
			[ "$rest" != "$line" ] ||
				fail "$unit_name: ExecStart does not run $installed_exec: $line"
			line="ExecStart=\"${bin//%/%%}\"$rest"
			;;
		esac
		printf '%s\n' "$line"
	done <"$unit" >"$dir/$unit_name"
	[ "$nexec" -eq 1 ] || fail "expected one ExecStart= line in $unit, found $nexec"

	# A template is verified through one instance, which checks its %i uses.
	out=$(systemd-analyze verify "${verify_opts[@]}" "$dir/$instance_name" 2>&1)
	rc=$?
	[ -z "$out" ] || printf '%s\n' "$out"
	[ "$rc" -eq 0 ] || fail "systemd-analyze verify $instance_name exited $rc"
	if printf '%s\n' "$out" | grep -qF -e "${unit_name%%[@.]*}" -e "$tmp"; then
		fail "systemd-analyze verify warned about $instance_name (above)"
	fi
	echo "ok: systemd-analyze verify $instance_name"

	if [ "$can_rate" = 1 ]; then
		out=$(systemd-analyze security --offline=yes --threshold="$max_exposure" \
			--no-pager "$dir/$instance_name" 2>&1)
		rc=$?
		if [ "$rc" -ne 0 ]; then
			printf '%s\n' "$out"
			fail "$instance_name: exposure level above $max_shown, or security failed ($rc)"
		fi
		level=$(printf '%s\n' "$out" |
			sed -n 's/.*Overall exposure level[^:]*: \([0-9.]*\).*/\1/p')
		echo "ok: systemd-analyze security $instance_name: exposure ${level:-?}" \
			"(at most $max_shown)"
	fi
}

check_unit dml-sched.service sched/dml-sched dml-sched.service
check_unit dml-server@.service server/dml-server dml-server@shard0.service
check_unit dml-worker@.service worker/dml-worker dml-worker@worker1.service
check_unit dml-aggregator@.service server/dml-aggregator dml-aggregator@zoneA.service

[ "$can_rate" = 1 ] ||
	echo "note: systemd-analyze cannot rate units offline; exposure not checked"

# Type=notify waits for READY=1, which only a libsystemd build sends.
if [ -f "$builddir/config.h" ] && ! grep -q '^#define HAVE_SYSTEMD 1' "$builddir/config.h"; then
	echo "note: built without libsystemd; under these Type=notify units every" \
		"start would time out"
fi
exit 0
