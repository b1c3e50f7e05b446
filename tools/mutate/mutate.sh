#!/usr/bin/env bash
# Mutation testing of the packages that keep qunfa's promises (no duplicate,
# nothing lost, counts add up, never over the rate) with gremlins.
#
#   tools/mutate/mutate.sh [target...]     (default: every target, in order)
#
# Targets and the test packages that judge their mutants:
#   breaker      internal/breaker          breaker, sender
#   control      internal/control          control, reconcile, sender
#   reconcile    internal/reconcile        reconcile, control, sender
#   sender       internal/sender           sender (fake-clock tests, without
#                                          the property test)
#   sqlitestore  sqlitestore/items.go,     sqlitestore, sender, reconcile
#                runs.go
#   dynamostore  dynamostore/items.go,     dynamostore on dynalite: the item
#                page.go                   tests of the conformance suite and
#                                          the adapter's page tests
#
# Environment:
#   MUTATE_TESTS     replace a target's test packages (import paths or ./dirs)
#   MUTATE_WORKERS   gremlins workers (default 1: the machine is shared)
#   MUTATE_TIMEOUT   timeout coefficient: a mutant whose tests run longer
#                    than this many times the coverage run is killed and
#                    counted "timed out" (default 4)
#   MUTATE_OUT       directory of the JSON reports (default mutate-out/)
#   MUTATE_FILES     mutate only these files of the target's directory
#                    (space-separated base names, e.g. "finish.go state.go"):
#                    a large target measured in short runs; the report is
#                    then mutate-out/<target>-<first file>.json
#   MUTATE_NICE      niceness of the run (default 15: the machine is shared)
#   MUTATE_DIFF      mutate only the lines changed since this git commit
#                    (gremlins --diff, paths relative to the package): a
#                    long file measured from a line on — commit the file
#                    with those lines altered, then the file as it is, and
#                    name the first commit (docs/mutation.md shows how)
#
# A mutant is KILLED when a test fails, TIMED OUT when its tests hang
# (both count as caught), LIVED when every test passes, NOT COVERED when no
# test runs its line. Efficacy = killed / (killed + lived).
set -euo pipefail
cd "$(dirname "$0")/../.."
root=$PWD
mod=$(go list -m)
gremlins=${GREMLINS:-$(command -v gremlins || echo "$(go env GOPATH)/bin/gremlins")}
if [[ ! -x $gremlins ]]; then
	echo "gremlins not installed: go install github.com/go-gremlins/gremlins/cmd/gremlins@v0.6.0" >&2
	exit 2
fi
realgo=$(command -v go)
# The installed emulators, for the copies gremlins makes (see bin/go).
emulators=$(dirname "$(readlink -f "$root/tools/emulators/node_modules")")
out=${MUTATE_OUT:-$root/mutate-out}
mkdir -p "$out"

# shellcheck source=tools/mutate/targets.sh
source "$root/tools/mutate/targets.sh"

# excludes_but DIR FILE...: gremlins -E flags excluding every non-test Go
# file of DIR except the FILEs (gremlins matches them against paths relative
# to DIR).
excludes_but() {
	local dir=$1 f
	shift
	for f in "$dir"/*.go; do
		f=$(basename "$f")
		[[ $f == *_test.go || " $* " == *" $f "* ]] && continue
		printf -- '-E\n^%s$\n' "${f//./\\.}"
	done
}

run() {
	local name=$1 dir=$2 tests=$3 testflags=$4 only=${5:-}
	local -a flags=()
	if [[ -n ${MUTATE_FILES:-} ]]; then
		only=$MUTATE_FILES
		local -a files
		read -r -a files <<<"$MUTATE_FILES"
		name=$name-${files[0]%.go}
	fi
	if [[ -n $only ]]; then
		# shellcheck disable=SC2086 # a list of file names
		mapfile -t flags < <(excludes_but "$dir" $only)
	fi
	if [[ -n ${MUTATE_DIFF:-} ]]; then
		flags+=(--diff "$MUTATE_DIFF")
	fi
	# Only the target package is instrumented: its blocks decide which
	# mutants are covered.
	flags+=(--coverpkg "$mod/${dir#./}")
	# gremlins runs a mutant's tests inside the package's directory (of a
	# copy of the module): name the test packages by import path.
	local -a pkgs=()
	local p
	for p in ${MUTATE_TESTS:-$tests}; do
		[[ $p == ./* ]] && p=$mod/${p#./}
		pkgs+=("$p")
	done
	echo "== $name: $dir${only:+ ($only)}, judged by: ${pkgs[*]} $testflags" >&2
	(
		cd "$dir"
		PATH=$root/tools/mutate/bin:$PATH \
			QUNFA_MUTATE_GO=$realgo \
			QUNFA_MUTATE_TESTS="${pkgs[*]}" \
			QUNFA_MUTATE_FLAGS=$testflags \
			QUNFA_EMULATORS_DIR=$emulators \
			QUNFA_REQUIRE_EMULATORS=$t_emulators \
			GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=diff.relative GIT_CONFIG_VALUE_0=true \
			nice -n "${MUTATE_NICE:-15}" "$gremlins" unleash "$PWD" \
			--workers "${MUTATE_WORKERS:-1}" \
			--timeout-coefficient "${MUTATE_TIMEOUT:-4}" \
			--invert-logical --invert-loopctrl \
			--output "$out/$name.json" \
			"${flags[@]}"
	)
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=("${all_targets[@]}")
for t in "${targets[@]}"; do
	if ! target "$t"; then
		echo "unknown target $t (${all_targets[*]})" >&2
		exit 2
	fi
	run "$t" "$t_dir" "$t_tests" "$t_flags" "$t_files"
done
