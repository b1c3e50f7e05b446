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
#   sender       internal/sender           sender, reconcile, control, breaker
#   sqlitestore  sqlitestore/items.go      sqlitestore, sender, reconcile
#   dynamostore  dynamostore/items.go      dynamostore (dynalite)
#
# Environment:
#   MUTATE_TESTS     replace a target's test packages (import paths or ./dirs)
#   MUTATE_WORKERS   gremlins workers (default 1: the machine is shared)
#   MUTATE_TIMEOUT   timeout coefficient: a mutant whose tests run longer
#                    than this many times the coverage run is killed and
#                    counted "timed out" (default 4)
#   MUTATE_OUT       directory of the JSON reports (default mutate-out/)
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
out=${MUTATE_OUT:-$root/mutate-out}
mkdir -p "$out"

# -short skips the tests that measure wall-clock rates: under a mutant's
# load they fail whatever the mutant; the fake-clock tests cover that code.
short=-short

# excludes_but DIR FILE: gremlins -E flags excluding every non-test Go file
# of DIR except FILE (gremlins matches them against paths relative to DIR).
excludes_but() {
	local f
	for f in "$1"/*.go; do
		f=$(basename "$f")
		[[ $f == *_test.go || $f == "$2" ]] && continue
		printf -- '-E\n^%s$\n' "${f//./\\.}"
	done
}

run() {
	local name=$1 dir=$2 tests=$3 only=${4:-}
	local -a flags=()
	if [[ -n $only ]]; then
		mapfile -t flags < <(excludes_but "$dir" "$only")
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
	echo "== $name: $dir${only:+/$only}, judged by: ${pkgs[*]}" >&2
	(
		cd "$dir"
		PATH=$root/tools/mutate/bin:$PATH \
			QUNFA_MUTATE_GO=$realgo \
			QUNFA_MUTATE_TESTS="${pkgs[*]}" \
			QUNFA_MUTATE_FLAGS=$short \
			QUNFA_MUTATE_EMULATORS=$(readlink -f "$root/tools/emulators/node_modules" 2>/dev/null || true) \
			nice -n 10 "$gremlins" unleash "$PWD" \
			--workers "${MUTATE_WORKERS:-1}" \
			--timeout-coefficient "${MUTATE_TIMEOUT:-4}" \
			--invert-logical --invert-loopctrl \
			--output "$out/$name.json" \
			"${flags[@]}"
	)
}

targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(breaker control reconcile sender sqlitestore dynamostore)
for t in "${targets[@]}"; do
	case $t in
	breaker) run breaker ./internal/breaker "./internal/breaker ./internal/sender" ;;
	control) run control ./internal/control "./internal/control ./internal/reconcile ./internal/sender" ;;
	reconcile) run reconcile ./internal/reconcile "./internal/reconcile ./internal/control ./internal/sender" ;;
	sender) run sender ./internal/sender "./internal/sender ./internal/reconcile ./internal/control ./internal/breaker" ;;
	sqlitestore) run sqlitestore ./internal/store/sqlitestore "./internal/store/sqlitestore ./internal/sender ./internal/reconcile" items.go ;;
	dynamostore) run dynamostore ./internal/store/dynamostore "./internal/store/dynamostore" items.go ;;
	*)
		echo "unknown target $t (breaker control reconcile sender sqlitestore dynamostore)" >&2
		exit 2
		;;
	esac
done
