#!/usr/bin/env bash
# Checks the systemd unit in conf/systemd with systemd-analyze: `verify` must
# pass with no warning about the unit, and where this systemd can rate units
# offline, the hardening must keep the exposure level at 2.0 or below.
# verify needs ExecStart to exist, so it runs on a copy whose ExecStart points
# at the dml-server of this build. Never touches the running system's units.
# Exit status: 0 pass, 1 fail, 77 skip (no systemd-analyze).
set -u

if ! command -v systemd-analyze >/dev/null 2>&1; then
	echo "SKIP: systemd-analyze not found (Debian package systemd)"
	exit 77
fi

srcdir=${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}
builddir=${DML_BUILDDIR:-.}
unit_name=dml-server@.service
unit=$srcdir/conf/systemd/$unit_name
server=$builddir/server/dml-server
installed_exec=/usr/local/bin/dml-server
# --threshold scores exposure 0..100; systemd prints it as 0.0..10.0.
max_exposure=20
max_shown=$((max_exposure / 10)).$((max_exposure % 10))

fail() {
	echo "FAIL: $*" >&2
	exit 1
}

[ -f "$unit" ] || fail "$unit is missing"
[ -x "$server" ] || fail "$server is not built"
server=$(cd "$(dirname "$server")" && pwd)/dml-server
case $server in
*'"'* | *\\*) fail "cannot quote the build path in ExecStart: $server" ;;
esac

tmp=$(mktemp -d -t dml-units.XXXXXX) || fail "mktemp"
trap 'rm -rf "$tmp"' EXIT

# Copy the unit with the installed binary replaced by the built one; '%'
# starts a specifier in unit files, so the path doubles it.
nexec=0
while IFS= read -r line || [ -n "$line" ]; do
	case $line in
	ExecStart=*)
		nexec=$((nexec + 1))
		rest=${line#"ExecStart=$installed_exec"}
		[ "$rest" != "$line" ] ||
			fail "ExecStart does not run $installed_exec: $line"
		line="ExecStart=\"${server//%/%%}\"$rest"
		;;
	esac
	printf '%s\n' "$line"
done <"$unit" >"$tmp/$unit_name"
[ "$nexec" -eq 1 ] || fail "expected one ExecStart= line in $unit, found $nexec"

# Verify one instance: that instantiates the template and checks %i uses.
instance=$tmp/dml-server@shard0.service
opts=(--man=no)
if systemd-analyze --help 2>&1 | grep -q -- --recursive-errors; then
	# Only this unit counts; the host's own targets are not under test.
	opts+=(--recursive-errors=no)
fi
out=$(systemd-analyze verify "${opts[@]}" "$instance" 2>&1)
rc=$?
[ -z "$out" ] || printf '%s\n' "$out"
[ "$rc" -eq 0 ] || fail "systemd-analyze verify exited $rc"
if printf '%s\n' "$out" | grep -qF -e dml-server@ -e "$tmp"; then
	fail "systemd-analyze verify warned about the unit (above)"
fi
echo "ok: systemd-analyze verify dml-server@shard0.service"

if systemd-analyze --help 2>&1 | grep -q -- --offline; then
	out=$(systemd-analyze security --offline=yes --threshold="$max_exposure" \
		--no-pager "$instance" 2>&1)
	rc=$?
	if [ "$rc" -ne 0 ]; then
		printf '%s\n' "$out"
		fail "exposure level above $max_shown, or security failed ($rc)"
	fi
	level=$(printf '%s\n' "$out" |
		sed -n 's/.*Overall exposure level[^:]*: \([0-9.]*\).*/\1/p')
	echo "ok: systemd-analyze security: exposure ${level:-?} (at most $max_shown)"
else
	echo "note: systemd-analyze cannot rate units offline; exposure not checked"
fi

# Type=notify waits for READY=1, which only a libsystemd build sends.
if grep -q '^Type=notify' "$unit" && [ -f "$builddir/config.h" ] &&
	! grep -q '^#define HAVE_SYSTEMD 1' "$builddir/config.h"; then
	echo "note: built without libsystemd; under this unit its start would time out"
fi
exit 0
