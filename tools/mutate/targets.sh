# shellcheck shell=bash
# The mutation targets shared by tools/mutate/mutate.sh (gremlins) and
# tools/mutate/hand.sh (hand-made mutations): for each, the code it
# mutates and the tests that judge a mutant, with their `go test` flags.

# -short skips the tests that measure wall-clock rates: under a mutant's
# load they fail whatever the mutant; the fake-clock tests cover that code.
# -failfast: a caught mutant is judged at its first failing test.
short="-short -failfast"

# The sender's tests without TestNoDuplicateSendsUnderFaults: a randomised
# search (a new seed every run, 7 s) rather than a deterministic judge.
# What is left runs in about 5 s on fake clocks.
sender_flags="$short -skip ^TestNoDuplicateSendsUnderFaults\$"

# The DynamoDB adapter's item code is judged by the conformance subtests
# that write, claim, settle, list and count items, and by the adapter's own
# page and claim tests (the other conformance subtests — accounts, tenants,
# webhooks, ... — never run items.go or page.go beyond creating a job).
dynamo_items="PutItems|ClaimItems|ClaimItemsConcurrent|UpdateItems|UpdateItemsManyAtOnce|UpdateItemsOtherShard|GetItems|MsgIDsOfManyConfirmations|SubmittedFoundWhenClaimClockIsBehind|ConfirmedAfterRetryRedriven|ClaimItemsRefusesBadArguments|MsgIDOnlyWhenConfirmed|NextDueAtAcrossPages|ListItems|ListSubmittedItems|ItemRefs|ItemOutcomes|AttemptCounters|ConfirmedAfterRetry|AdvanceShard|AddShardCounts|RecountShard|ImpossibleCountsRecounted|ShardCountsProperty|BeginTurnRepairsDirtyShard|Canary|Staging"
dynamo_tests="TestConformance|TestClaimSkipsAPageTheIndexStillNames|TestSubmittedSlotWithoutItsClaimReads|TestWritesGiveUpAfterMaxRetries|TestRefusedFailureLeavesNoErrorDetails|TestRejectedUpdateWritesNothing|TestReadingItemsWithoutIDsSkipsMsgidRecords|TestMsgIDsMoveOutExactlyWhenTheyCostAWriteUnit|TestStaleCacheSpendsNoRetry|TestItemOutcomesOfAFullPage|TestMessageIDsRoundTrip|TestCachedPageChangedElsewhere|TestSenderLoopReads|TestNoCacheOutsideTurns|TestClaimsAcrossPagesAndRetriesBehindTheCursor|TestClaimRetriesAfterLosingThePageWrite|TestUpdateRetriesAfterLosingThePageWrite|TestMarkBetweenReadAndFold|TestAdditiveUpdatesSurviveLostAnswers|TestSlotsRoundTrip|TestMsgsRoundTrip|TestMembersRoundTrip|TestMembersStayCompact|TestPayloadRecordsSizedByBytes|TestDecodeRejectsCorruptState|TestDecodeRejectsEmptyRuns|TestPageClaimsAndOrdinals|TestStatusPageSize|TestPayloadCompression|TestFinishedJobsItemsExpire"
dynamo_flags="$short -run ^($dynamo_tests)\$/^($dynamo_items)\$"

all_targets=(breaker control reconcile sender sqlitestore dynamostore)

# target NAME: sets t_dir (the mutated package), t_tests (the test
# packages that judge it), t_flags (their go test flags), t_files (the
# files mutated; empty: every file of t_dir) and t_emulators (1: the tests
# need the AWS emulators, and fail rather than skip without them — a
# skipped judge would let every mutant live). Returns 1 for an unknown name.
target() {
	t_files=
	t_emulators=
	t_flags=$short
	case $1 in
	breaker) t_dir=./internal/breaker t_tests="./internal/breaker ./internal/sender" ;;
	control) t_dir=./internal/control t_tests="./internal/control ./internal/reconcile ./internal/sender" ;;
	reconcile) t_dir=./internal/reconcile t_tests="./internal/reconcile ./internal/control ./internal/sender" ;;
	sender) t_dir=./internal/sender t_tests="./internal/sender" t_flags=$sender_flags ;;
	sqlitestore) t_dir=./internal/store/sqlitestore t_tests="./internal/store/sqlitestore ./internal/sender ./internal/reconcile" t_files="items.go runs.go" ;;
	dynamostore) t_dir=./internal/store/dynamostore t_tests="./internal/store/dynamostore" t_flags=$dynamo_flags t_files="items.go page.go" t_emulators=1 ;;
	*) return 1 ;;
	esac
}
