#!/usr/bin/env bash
# Hand-made mutations of the code that keeps qunfa's promises: each file in
# tools/mutate/hand/*.mut is one plausible bug (a dropped guard, a skipped
# store write or kick, an off-by-one at a threshold, a wrong claim id, a
# lost error), applied alone to a copy of the module and judged by the
# target's tests (tools/mutate/targets.sh, as for make mutate).
#
#   tools/mutate/hand.sh [mutation-file-or-name...]   (default: every one)
#
# A .mut file is a header, then the exact text to replace (it must occur
# once in the file) and its replacement:
#
#   target: reconcile
#   file: internal/reconcile/reconcile.go
#   what: one line saying what the bug would break
#   ---
#   old text (one or more lines)
#   +++
#   new text
#
# Results: CAUGHT (a judging test failed), TIMED OUT (the tests hung past
# HAND_TIMEOUT seconds: caught too), LIVED (every test passed), STALE (the
# old text is no longer in the file: the code changed; rewrite the
# mutation), BROKEN (it does not compile: not counted). Before the
# mutations, each target's tests run once unmutated and must pass. The
# summary gives the catch rate per target; the exit status is 1 when a
# mutant lived.
#
# Environment: HAND_TIMEOUT (seconds per mutant, default 600), HAND_NICE
# (default 15), HAND_BASELINE=0 to skip the unmutated runs, HAND_RUN a
# go test -run pattern (which tests of the target judge, to check a new
# test against the mutants it is meant to catch).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
# shellcheck source=tools/mutate/targets.sh
source "$root/tools/mutate/targets.sh"

muts=()
if [[ $# -eq 0 ]]; then
	muts=("$root"/tools/mutate/hand/*.mut)
else
	for m in "$@"; do
		[[ -f $m ]] || m=$root/tools/mutate/hand/${m%.mut}.mut
		muts+=("$m")
	done
fi

work=$(mktemp -d)
trap 'chmod -R u+w "$work" 2>/dev/null; rm -rf "$work"' EXIT
# A copy of the module, so that the worktree is never mutated (and a run of
# make mutate alongside is not disturbed). node_modules stay symlinks.
copy=$work/mod
mkdir -p "$copy"
tar -C "$root" --exclude=./.git --exclude='./mutate-out' -cf - . | tar -C "$copy" -xf -

field() { sed -n "s/^$1: *//p;/^---\$/q" "$2"; }

judge() { # target: runs its tests in the copy; returns go test's status
	target "$1"
	local -a pkgs flags
	read -r -a pkgs <<<"$t_tests"
	read -r -a flags <<<"$t_flags"
	[[ -z ${HAND_RUN:-} ]] || flags+=(-run "$HAND_RUN")
	(cd "$copy" && QUNFA_REQUIRE_EMULATORS=$t_emulators timeout "${HAND_TIMEOUT:-600}" nice -n "${HAND_NICE:-15}" \
		go test -count=1 -timeout "${HAND_TIMEOUT:-600}s" "${flags[@]}" "${pkgs[@]}" >"$work/out" 2>&1)
}

declare -A caught=() total=()
if [[ ${HAND_BASELINE:-1} != 0 ]]; then
	declare -A seen=()
	for m in "${muts[@]}"; do
		t=$(field target "$m")
		[[ -n ${seen[$t]:-} ]] && continue
		seen[$t]=1
		# Once more on failure: a test that measures time can fail on a
		# machine that is very busy, whatever the code.
		if ! judge "$t" && ! judge "$t"; then
			echo "baseline: the tests of $t fail unmutated:" >&2
			tail -30 "$work/out" >&2
			exit 2
		fi
		echo "baseline $t: pass"
	done
fi

lived=0
for m in "${muts[@]}"; do
	name=$(basename "$m" .mut)
	t=$(field target "$m")
	f=$(field file "$m")
	what=$(field what "$m")
	if ! target "$t"; then
		echo "$name: unknown target $t" >&2
		exit 2
	fi
	cp "$copy/$f" "$work/orig"
	if ! python3 - "$m" "$copy/$f" <<'PY'; then
import sys
spec, path = sys.argv[1], sys.argv[2]
text = open(spec).read()
_, rest = text.split("\n---\n", 1)
old, new = rest.split("\n+++\n", 1)
new = new.rstrip("\n")
src = open(path).read()
if src.count(old) != 1:
    sys.exit(1)
open(path, "w").write(src.replace(old, new))
PY
		printf '%-6s %-12s %s\n' STALE "$name" "$what"
		continue
	fi
	total[$t]=$((${total[$t]:-0} + 1))
	start=$SECONDS
	set +e
	judge "$t"
	rc=$?
	set -e
	cp "$work/orig" "$copy/$f"
	if [[ $rc -eq 0 ]]; then
		res=LIVED
		lived=$((lived + 1))
	elif grep -q '\[build failed\]\|\[setup failed\]' "$work/out"; then
		# Not a bug a test caught: the mutation does not compile.
		res=BROKEN
		total[$t]=$((total[$t] - 1))
	else
		caught[$t]=$((${caught[$t]:-0} + 1))
		res=CAUGHT
		[[ $rc -eq 124 ]] && res="TIMED OUT"
		by=$(grep -m1 -o -- '--- FAIL: [^ ]*' "$work/out" | sed 's/--- FAIL: //' || true)
		[[ -n $by ]] && what="$what [$by]"
	fi
	printf '%-9s %-6s %3ds  %s\n' "$res" "$name" $((SECONDS - start)) "$what"
done

echo
echo "catch rate per target:"
for t in "${all_targets[@]}"; do
	[[ -n ${total[$t]:-} ]] || continue
	c=${caught[$t]:-0}
	printf '  %-12s %2d of %2d  %3d%%\n' "$t" "$c" "${total[$t]}" $((100 * c / total[$t]))
done
[[ $lived -eq 0 ]]
