#!/usr/bin/env bash
# The folders are the architecture: proto/ (wire, connections, config,
# logging, metrics, the scheduler link, job and table specs), shard/ and
# store/ are the shared ground; server/, sched/ and worker/ build on it and
# never include one another; tools/ sits on top; test/ may look anywhere.
# Every project include names its folder ("proto/conn.h"), so an include
# line says which room it reaches into. Fails, naming file and line, when:
#   - an include of a project header is not folder-qualified;
#   - a file includes a header of a folder above or beside its own
#     (proto/ nothing but proto/; shard/ proto/; store/ proto/ and shard/;
#     server/, sched/, worker/ the ground and themselves; tools/ all but
#     the internals);
#   - a file outside test/ includes another folder's *_internal.h.
# Exit status: 0 pass, 1 fail.
set -u
src="${DML_SRCDIR:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$src" || exit 1

allowed() { # folder -> the folders its files may include
	case $1 in
	proto) echo "proto" ;;
	shard) echo "proto shard" ;;
	store) echo "proto shard store" ;;
	server | sched | worker) echo "proto shard store $1" ;;
	tools) echo "proto shard store server sched worker tools" ;;
	test) echo "proto shard store server sched worker tools test" ;;
	esac
}

bad=0
files=0
for dir in proto shard store server sched worker tools test; do
	ok=" $(allowed "$dir") "
	for f in "$dir"/*.c "$dir"/*.h "$dir"/*.cu; do
		[ -f "$f" ] || continue
		files=$((files + 1))
		while IFS=: read -r line inc; do
			name=${inc#*\"}
			name=${name%\"*}
			case $name in
			config.h) continue ;; # the build's, at the top of the build tree
			*/*) ;;
			*)
				# worker/dml.h falls back to dml_error.h bare where proto/'s
				# is not there: installed, the two lie side by side.
				[ "$f:$name" = worker/dml.h:dml_error.h ] && continue
				echo "$f:$line: #include \"$name\" names no folder"
				bad=$((bad + 1))
				continue
				;;
			esac
			top=${name%%/*}
			case $ok in
			*" $top "*) ;;
			*)
				echo "$f:$line: $dir/ may not include $name ($dir/ builds on:$ok)"
				bad=$((bad + 1))
				continue
				;;
			esac
			case $name in
			*_internal.h)
				if [ "$top" != "$dir" ] && [ "$dir" != test ]; then
					echo "$f:$line: $name is internal to $top/"
					bad=$((bad + 1))
				fi
				;;
			esac
		done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f")
	done
done
[ "$files" -gt 100 ] || { echo "check_layering: only $files files found under $src"; exit 1; }
if [ "$bad" -gt 0 ]; then
	echo "check_layering: $bad include lines break the layering ($files files read)"
	exit 1
fi
echo "check_layering: $files files, every include folder-qualified and within its layer"
