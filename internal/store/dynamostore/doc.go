// Package dynamostore is the DynamoDB adapter of the store port: one table,
// single-item conditional writes (PutItem, UpdateItem, DeleteItem),
// BatchWriteItem, GetItem, BatchGetItem and Query only (no transactions, no
// scans).
//
// # Table
//
// Key pk (S) HASH, sk (S) RANGE; on-demand; four sparse global secondary
// indexes, all KEYS_ONLY so that rewriting a record only writes an index
// when that index's key changes. CreateTable creates it; template.yaml must
// declare the same (see CreateTable). Two indexes are overloaded: besides
// their job and shard entries, tenantJobs holds every campaign and running
// holds every circuit breaker, each under a partition key of its own, so the
// operations features need no index of their own.
//
//	entity            pk                  sk                     notes
//	job               JOB#<job>           J                      g1pk TENANT#<tenant>, g1sk <createdAt ns 20d>#<job>,
//	                                                             meta (submit's map), md (the submitter's metadata map),
//	                                                             rf (1: its refs have H# look-up records; absent: R#),
//	                                                             dw (payload width: 0 until the first PutItems sets it;
//	                                                             absent: 64, jobs created before; payloadwidth.go)
//	shard             JOB#<job>           K#<index 6d>           counts cP cS cC cF cA, failures f_<category>,
//	                                                             sv (version), epoch (count epoch; absent = 0),
//	                                                             att, attF (cumulative attempts, failed attempts;
//	                                                             absent = 0; only ever ADDed, never recounted),
//	                                                             g2pk RUNNING + g2sk <minute>#<job>#<index> while
//	                                                             running or paused with reason breaker;
//	                                                             g2pk DIRTY + g2sk <job>#<index> while final and in need of the sweep
//	status page       JOB#<job>           P#<index>#<block 10d>  state of the shard's items with seq in the block (256 seqs),
//	                                                             v (version), g3 due key, g4 submitted key; tb (base of the
//	                                                             items' times, Unix s), mb (message ids not yet moved),
//	                                                             ms (names of its msgid records, oldest first)
//	msgid record      JOB#<job>           O#<index>#<block>#<name>  m: message ids of some of the page's items (write-once)
//	member list       JOB#<job>           M#<index>#<block>      the page's seqs (write-once) and account; dw, the job's
//	                                                             payload width when not 64
//	payload           JOB#<job>           D#<seq/dw 10d>         to + vars + ref of dw consecutive seqs of any shard (the
//	                                                             job's width, 8..256, sized by bytes; 64 without dw),
//	                                                             deflated JSON (write-once)
//	error details     JOB#<job>           E#<index>#<seq 12d>    code, message of an item's last error (failed items only)
//	hashed ref look-up JOB#<job>          H#<bucket 1h>#<seq/512 10d>  h: seq (delta), shard (varints) and a 24-bit tag of
//	                                                             the ref's FNV-1a hash, for the items of 512 seqs whose ref
//	                                                             hashes to the bucket (of 4; hashrefs.go): jobs with rf = 1
//	ref look-up       JOB#<job>           R#<bucket 2h>#<seq/512 10d>  deflated JSON {ref: "seq.shard,..."} of the refs of
//	                  (jobs before rf)                           512 seqs hashed (FNV-1a mod 16) to the bucket (refs.go)
//	idempotency       IDEM#"<tenant>"#<key> _                    job id, request hash
//	token bucket      BUCKET#<name>       _                      tokens, at, warm (warm-up start), v
//	account           TENANT#<tenant>     ACCOUNT#<id>           limits; szBatch, szConc, szP99, szAt (the sender's sizing,
//	                                                             SaveAccountSizing; a PutAccount drops them)
//	breaker           TENANT#<tenant>     BREAKER#<account>      state, times, window, v (version; no record = closed, 0),
//	                                                             g2pk BREAKERS#open (open, half-open) or BREAKERS#closed,
//	                                                             g2sk <tenant>#<account>; trans (transitions so far),
//	                                                             h (the last 100 transitions, newest first, deflated
//	                                                             JSON: written in the same write as the state change)
//	breaker history   TENANT#<tenant>     BRKHIST#<account>#<slot 3d>  former ring of transitions, written by earlier
//	                  (read only)                                versions after their breaker save; read for a record
//	                                                             without h, whose next transition moves them into it
//	campaign          TENANT#<tenant>     CAMPAIGN#<id>          request (B), schedule, …; g1pk CAMPAIGNS, g1sk <tenant>#<id>
//	suppression       SUPP#<tenant>       <hex(account)>.<to>    account, to, reason, createdAt
//	frequency charges FREQ#"<tenant>"#<hex(account)>.<to> _     ch (JSON [{k: <job>#<seq>, at}] of the charges still in
//	                                                             the window when last written), v (version),
//	                                                             expires_at (TTL, Unix s: the newest charge + window;
//	                                                             past it the record reads as absent, deleted or not)
//	msg call          MSGCALL#"<account>"#<msg id>  MSGCALL    a provider call accepted under a message id (store.MsgCall):
//	                                                             account, msgId, jobId, shard, claimId, seqs (runs), at
//	msg call by job   MSGJOB#<job>        "<account>"#<msg id>   the same attributes (msgcalls.go)
//	API token         TOKEN#<hash>        _                      tenant
//	quota             TENANT#<tenant>     QUOTA                  maxRun, maxRcpt (quota.go)
//	daily recipients  TENANT#<tenant>     RCPT#<yyyy-mm-dd>      n (one conditional ADD per job)
//	                  (an active job's record: g4pk ACTIVE#<tenant>, g4sk <job>; see quota.go)
//
// Indexes: tenantJobs (g1pk, g1sk) lists a tenant's jobs newest first, and
// under g1pk = CAMPAIGNS every tenant's campaigns; running (g2pk, g2sk) holds
// running and breaker-paused shards under g2pk = RUNNING keyed by the minute
// of their last advance, final shards that need the reconciler's sweep
// (dirty, or outcomes that may be unpublished: store.NeedsSweep) under
// g2pk = DIRTY (ListDirtyShards), and every breaker under
// BREAKERS#open or
// BREAKERS#closed (a save that changes the state moves the entry); due (g3pk = DUE#<job>#<index>, g3sk = <earliest
// NextAttemptAt of the page's pending items>#<block>) holds the status pages
// that have pending items; submitted (g4pk = SUB, g4sk = <oldest
// submitted-at>#<job>#<index>#<block>) holds pages that had submitted items.
//
// # Status pages
//
// Items are split into write-once data (member list, payload) and a small
// status page per (shard, block = seq/256). The mapping depends on shard and
// seq only, so every writer and every retry agrees on it. The page holds,
// per member in seq order, status, attempts, next-attempt time, claim and
// error category, run-length encoded ("256:p0" for a fresh page), plus the
// claims (id, submitted-at) its submitted items refer to. A steady-state
// page is about 450 bytes (one write unit); the worst case (every item
// distinct and submitted under its own claim) about 30 KB, far below the
// 400 KB item limit. Error code and message live in E# records, written
// only for updates that carry an error; the page keeps the category, so
// counts, filters and Failures never need them.
//
// Outcome details: each run also carries the items' claim time and finish
// time, in seconds from the page's base time (tb), so the items of one
// claim settled by one update stay one run and a full page of confirmed
// items stays within one write unit; the API shows these times to the
// second on DynamoDB (to the nanosecond for an item still submitted: its
// claim's time). A run marks items with a provider message id; the ids
// stay in the page (mb: deflated, runs of items sharing one id written
// once) while they cost no extra write unit on the page's writes, then
// move all at once to a new write-once msgid record (O#, z: the same
// bytes) the page names (ms). Ids of one provider share most characters
// and deflate 3 to 4 times (numbered ones, the mock's): 0.004 write units
// per message (TestCostPerMessage); random ids of 32 characters, 11 to 12
// records for a page of 256 (TestItemOutcomesOfAFullPage): 0.043. Random
// ids deflate close to their entropy: 32 hex characters to 19.4 bytes an
// id with its ordinal (16 of information), 32 base64url ones to 28 (24):
// decoding them to binary would save 11 to 12 % of these bytes, about
// 0.005 write units per message, as a record moves what the page has
// room for (about 600 bytes) whatever the encoding. A msgid
// record whose page write lost the race is never named, so never read.
// The sender's hot loop never reads them (a claimed item has no id); a
// listing reads a page's msgid records only for items whose id moved.
//
// # Access patterns
//
//	CreateJob          PutItem idempotency (attribute_not_exists); on a lost race GetItem it:
//	                   other hash → ErrConflict, same hash → GetJob, or finish the job under the
//	                   recorded id if a crash left only the idempotency record; PutItem each shard,
//	                   then the job (attribute_not_exists)
//	PutItems           GetItem job (must be creating); the first sizes the payload records (UpdateItem
//	                   dw on condition dw = 0; payloadwidth.go); BatchGetItem the M/P/D/H records touched;
//	                   merge; conditional PutItem (version) of changed records only; member lists
//	                   before status pages
//	GetJob             Query pk = JOB#<job>, sk BETWEEN "J" AND "K#~"
//	ListJobs           Query tenantJobs descending (Limit+1) + BatchGetItem; cursor = index key
//	TransitionJob, UpdateJobLimits
//	                   GetItem + UpdateItem conditional on the value read (retry on conflict)
//	ReserveBudget      GetItem + UpdateItem ADD conditional on the grant still fitting (no budget,
//	                   or used <= budget − n); a partial grant: UpdateItem SET conditional on the
//	                   value read; retry on conflict with jittered backoff
//	GetShard           GetItem
//	BeginTurn          drops the shard's cached records; GetItem; if Dirty, Query the shard's P#
//	                   pages and recount (epoch + 1); UpdateItem on sv
//	AdvanceShard       GetItem (none when this process wrote or read the shard last: recordCache)
//	                   + UpdateItem on sv, checking turn and epoch on the record: ADD counts/
//	                   failures; on a stale epoch recount + SET instead
//	AddShardCounts     UpdateItem ADD, condition epoch; on a stale epoch as RecountShard
//	RecountShard       GetItem + Query P# pages + UpdateItem on sv (epoch + 1)
//	AdvanceShard also ADDs the attempt counters in the same UpdateItem (in either branch, so
//	                   they are added whatever the epoch, and still one write per advance),
//	                   and SETs the outcomes watermark ocTo (and ocRe, the replay mark) in it:
//	                   ~14 bytes more on the shard record, no extra request
//	store.ListOutcomesSince (a turn's replay of outcomes, only on a shard marked for it: a turn
//	                   died, an outside change touched it, a publish failed)
//	                   ListItems by status and shard, three statuses: walks the shard's
//	                   status pages (Query, 16 pages a request) and reads payloads of the
//	                   final items it returns; ~ one RCU per status page per status plus
//	                   the payload pages, once per replay, not per message
//	TransitionShard    GetItem + UpdateItem on status, dirty and the outcome marks (ocRe, ocOut)
//	                   as read, sv + 1 (every shard write moves sv, see recordCache); enters/
//	                   leaves the running index (entering running or paused with reason
//	                   breaker keeps it in; a final shard that needs the sweep goes to the
//	                   DIRTY partition)
//	ListStaleShards    Query running (g2pk = RUNNING, g2sk < next minute of Before) +
//	                   BatchGetItem, exact filter (running, or paused with reason breaker)
//	MarkShardDirty     GetItem + UpdateItem on sv: dirty, epoch + 1, ocRe, sv + 1 (+ DIRTY entry if
//	                   final)
//	ListDirtyShards    Query running (g2pk = DIRTY) + BatchGetItem, exact filter (final and in
//	                   need of the sweep;
//	                   a stale entry is removed, conditionally)
//	ClaimItems         Query due (Limit 4) → first due page; BatchGetItem page (+ member list,
//	                   cached) unless this process wrote or read it last (recordCache); PutItem
//	                   page conditional on its version (a stale cached page: read, redo);
//	                   BatchGetItem payloads not cached yet
//	UpdateItems        per page: BatchGetItem page unless cached (a rejection or an error record
//	                   is decided on a fresh read); BatchWriteItem E# records of accepted errors;
//	                   PutItem page conditional on its version (redo the page on a lost race)
//	ListItems          per shard Query P# pages in block order, merged by seq; payloads and E# by
//	                   BatchGetItem for the returned items only; cursor = last seq. By ref: Query the
//	                   ref's bucket H# records from the cursor's block (16 a page, until the page of
//	                   items is full) + the status pages of the entries whose tag matches, keeping
//	                   the items whose payload holds the ref; reads a quarter of the job's entries
//	                   (about 5 bytes each) at most, and a status page of another item's once in
//	                   2^24 entries (R# records of older jobs: 1/16 of the refs, exact)
//	ListSubmittedItems Query submitted (g4sk < SubmittedBefore) + page reads; cursor = page key +
//	                   last seq. The submitted key is sticky (set by a claim, not removed by a
//	                   confirm, so the hot loop never writes that index); this query tidies it.
//	TakeTokens         GetItem + PutItem conditional on the version read (retry on conflict);
//	                   nothing is written when nothing is granted
//	TakeSlots          GetItem + PutItem (BUCKET#pace:<bucket>) conditional on the version read
//	                   (retry on conflict); nothing is written when no slot is granted
//	Accounts, tokens   PutItem / GetItem / Query begins_with(sk, "ACCOUNT#")
//	GetBreaker         GetItem (TENANT#<tenant>, BREAKER#<account>); absent = closed, version 0
//	SaveBreaker        UpdateItem conditional on v = the version read (attribute_not_exists for 0),
//	                   leaving h as it is; with a transition, GetItem (consistent) first for h,
//	                   and h rewritten with the entry in the same UpdateItem
//	ListBreakerHistory GetItem (consistent) of the breaker record
//	ListBreakers       Query running (g2pk = BREAKERS#open; also BREAKERS#closed for AllStates)
//	                   + BatchGetItem; the state is checked on the record (the index lags)
//	PutSuppressions    BatchWriteItem PutRequests (duplicates in one call written once)
//	DeleteSuppression  DeleteItem (absent: no error)
//	SuppressedAmong    BatchGetItem of the recipients' keys: one request per 100 recipients,
//	                   the (at most 5) requests in parallel; 1 RCU per recipient asked about
//	ListSuppressions   Query pk = SUPP#<tenant> (Limit+1): the sort key orders by account then
//	                   recipient (hex keeps the accounts' byte order, and "." sorts before every
//	                   hex digit); cursor = last sort key
//	ChargeFrequency    per item: GetItem (consistent) + PutItem conditional on the version read
//	                   (retry on conflict); nothing is written for an item over the cap or already
//	                   charged. A capped account adds 1 RCU and 1 WCU per message sent.
//	FrequencyCounts    BatchGetItem of the recipients' records (eventually consistent; preview)
//	Campaigns          PutItem / GetItem / DeleteItem (attribute_exists: absent → ErrNotFound);
//	                   a tenant's: Query begins_with(sk, "CAMPAIGN#"); all tenants' (the local
//	                   scheduler, rare): Query tenantJobs (g1pk = CAMPAIGNS) + BatchGetItem
//
// # Cost
//
// The sender loop "take 10 tokens, claim 10, confirm 10" is three writes
// of records under 1 KB a batch, and the shard's advance one more every
// second batch (sender.Config.FoldEvery): 0.35 write units per message.
// The snapshot adds about 0.03 (status pages and member lists are one
// write per 256 items; payload records are sized by bytes, each ending
// just short of a whole KB: payloadwidth.go), so a job of 1,000
// single-recipient items costs 0.389 WCU per message on dynalite with the
// mock's numbered message ids, 0.428 with random ids of 32 characters
// (BenchmarkCostPerMessage, TestCostPerMessage). A reference on every
// recipient adds its share of a hashed look-up record, about 5 bytes:
// 0.400 in all with numbered references, 0.453 with random 19-digit ones
// and random ids, 0.463 with random UUIDs (BenchmarkCostPerMessageWithRefs,
// TestCostPerMessageWithRefs; R# records, one of 16 per 512 seqs written
// whole at each PutItems that touched it, cost 0.039 where H# records
// cost 0.012). Payload records of a fixed 64 items, the layout before,
// cost 0.396, 0.405, 0.463 and 0.464 in these cases: 64 of the mock's items
// deflate to about 510 bytes (half a write unit wasted), 64 with 19-digit
// references to about 1,270 (two units); sized, the records hold 132 and
// 203 items (0.009 and 0.020 write units per item, were 0.016 and 0.031,
// TestPayloadRecordsSizedByBytes), and the reads of payloads fall with
// their number (0.211 to 0.195 RCU per message, 0.223 to 0.201). Index writes, which
// dynalite does not charge, happen only when an index key changes: a page
// enters and leaves the due index once per pass over it, the submitted index
// once per page between reconciler runs, the running index once per shard
// per minute — a few hundredths of a unit per message.
//
// Recounts and count epochs. A recount reads the shard record, then the
// status pages, and stores the tally with epoch + 1 on condition the record's
// version (sv) is still the one read; every fold and recount adds to sv, so
// no delta folded meanwhile is overwritten. A fold is conditional on the
// epoch its caller read, so a delta the recount may already include is never
// added on top of it.
//
// Operations records. A breaker is one small record per account, written
// only when its state or window changes; the scheduled check lists the
// non-closed ones of all tenants with one Query of a partition that holds
// only them. A tenant's suppression list is one item collection: listing
// is a Query in order, a look-up reads exactly the recipients asked about
// (strongly consistent, so a recipient suppressed a moment ago is not
// sent to). Attempt counters ride on the AdvanceShard write the sender
// makes anyway, so they add no write (a few bytes to the shard record).
//
// Known limits: items of a shard interleaved with many other shards' share
// blocks with them, so a status page holds fewer of the shard's items (the
// storetest fixtures deal seqs round-robin); a claim never spans pages, so
// it returns at most the due items of one page. PutItems of the same job
// must not run concurrently on overlapping blocks with different content
// (each write is conditional, so a race is retried, never lost). ClaimID
// and SubmittedAt are kept only while an item is submitted. The index
// queries are eventually consistent on AWS: a page just changed may be
// missed by one claim or listing, never claimed twice (the page write is
// conditional). A shard paused by its breaker before the running index
// covered breaker-paused shards has no index entry: ListStaleShards finds it
// once it is transitioned again. The BREAKERS# and CAMPAIGNS partitions are
// single index partitions: fine for thousands of breakers and campaigns, the
// scale of operators, not of recipients. All suppression look-ups of a
// tenant read one partition; DynamoDB splits a hot partition by sort-key
// range, but a first submit of a million recipients may be throttled until
// it has (the adapter retries unprocessed keys).
package dynamostore
