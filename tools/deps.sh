# Sourced by tools/check and tools/quickstart: installs the Debian packages
# the build and the tests need (dataset-fashion-mnist: the data set the
# readers and, later, the MLP app are tested on; man-db and groff-base: the
# manual pages rendered by tools/check), when they are missing.
# Needs root (or sudo) only when something is actually missing.

DML_DEPS="build-essential autoconf automake libtool pkg-config libevent-dev
libprotobuf-c-dev protobuf-c-compiler liblmdb-dev libopenblas-dev check
zlib1g-dev libssl-dev libsystemd-dev systemd dataset-fashion-mnist man-db groff-base"

dml_install_deps() {
	local missing=() pkg sudo=
	for pkg in $DML_DEPS "$@"; do
		dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$pkg")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "dml: installing missing packages: ${missing[*]}"
	if [ "$(id -u)" -ne 0 ]; then
		if command -v sudo >/dev/null 2>&1; then
			sudo=sudo
		else
			echo "dml: not root and no sudo; install these first: ${missing[*]}" >&2
			return 1
		fi
	fi
	$sudo env DEBIAN_FRONTEND=noninteractive apt-get update -qq &&
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends \
			"${missing[@]}" >/dev/null
}

# Configure (once) and build the tree in $1 with the remaining configure flags.
dml_build() {
	local dir=$1 top
	shift
	top=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	[ -x "$top/configure" ] || (cd "$top" && autoreconf -fi >/dev/null)
	mkdir -p "$dir"
	(cd "$dir" &&
		{ [ -f Makefile ] || "$top/configure" -q "$@"; } &&
		{ make -j2 >build.log 2>&1 || { tail -n 40 build.log; exit 1; }; })
}
