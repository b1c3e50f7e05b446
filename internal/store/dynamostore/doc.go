// Package dynamostore is the DynamoDB adapter of the store port: one table,
// single-item conditional writes, BatchWriteItem, GetItem, BatchGetItem and
// Query only (no transactions, no scans).
//
// # Table
//
// Key pk (S) HASH, sk (S) RANGE; on-demand; four sparse global secondary
// indexes, all KEYS_ONLY so that rewriting a record only writes an index
// when that index's key changes. CreateTable creates it; template.yaml must
// declare the same (see CreateTable).
//
//	entity            pk                  sk                     notes
//	job               JOB#<job>           J                      g1pk TENANT#<tenant>, g1sk <createdAt ns 20d>#<job>
//	shard             JOB#<job>           K#<index 6d>           counts cP cS cC cF cA, failures f_<category>,
//	                                                             sv (version), epoch (count epoch; absent = 0),
//	                                                             g2pk RUNNING + g2sk <minute>#<job>#<index> while running
//	status page       JOB#<job>           P#<index>#<block 10d>  state of the shard's items with seq in the block (256 seqs),
//	                                                             v (version), g3 due key, g4 submitted key
//	member list       JOB#<job>           M#<index>#<block>      the page's seqs (write-once) and account
//	payload           JOB#<job>           D#<seq/64 10d>         to + vars of 64 seqs of any shard, deflated JSON (write-once)
//	error details     JOB#<job>           E#<index>#<seq 12d>    code, message of an item's last error (failed items only)
//	idempotency       IDEM#"<tenant>"#<key> _                    job id, request hash
//	token bucket      BUCKET#<name>       _                      tokens, at, v (version)
//	account           TENANT#<tenant>     ACCOUNT#<id>
//	API token         TOKEN#<hash>        _                      tenant
//
// Indexes: tenantJobs (g1pk, g1sk) lists a tenant's jobs newest first;
// running (g2pk, g2sk) holds running shards keyed by the minute of their
// last advance; due (g3pk = DUE#<job>#<index>, g3sk = <earliest
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
// # Access patterns
//
//	CreateJob          PutItem idempotency (attribute_not_exists); on a lost race GetItem it:
//	                   other hash → ErrConflict, same hash → GetJob, or finish the job under the
//	                   recorded id if a crash left only the idempotency record; PutItem each shard,
//	                   then the job (attribute_not_exists)
//	PutItems           GetItem job (must be creating); BatchGetItem the M/P/D records touched;
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
//	BeginTurn          GetItem; if Dirty, Query the shard's P# pages and recount (epoch + 1);
//	                   UpdateItem on sv
//	AdvanceShard       UpdateItem ADD counts/failures, condition turn, epoch (and cursor <= new
//	                   cursor); on a stale epoch GetItem + recount + UpdateItem SET on sv instead
//	AddShardCounts     UpdateItem ADD, condition epoch; on a stale epoch as RecountShard
//	RecountShard       GetItem + Query P# pages + UpdateItem on sv (epoch + 1)
//	TransitionShard    GetItem + UpdateItem on status; enters/leaves the running index
//	ListStaleShards    Query running (g2sk < next minute of Before) + BatchGetItem, exact filter
//	ClaimItems         Query due (Limit 4) → first due page; BatchGetItem page (+ member list,
//	                   cached); PutItem page conditional on its version; BatchGetItem payloads
//	UpdateItems        per page: BatchGetItem page; BatchWriteItem E# records of accepted errors;
//	                   PutItem page conditional on its version (redo the page on a lost race)
//	ListItems          per shard Query P# pages in block order, merged by seq; payloads and E# by
//	                   BatchGetItem for the returned items only; cursor = last seq
//	ListSubmittedItems Query submitted (g4sk < SubmittedBefore) + page reads; cursor = page key +
//	                   last seq. The submitted key is sticky (set by a claim, not removed by a
//	                   confirm, so the hot loop never writes that index); this query tidies it.
//	TakeTokens         GetItem + PutItem conditional on the version read (retry on conflict);
//	                   nothing is written when nothing is granted
//	Accounts, tokens   PutItem / GetItem / Query begins_with(sk, "ACCOUNT#")
//
// # Cost
//
// The sender loop "take 10 tokens, claim 10, confirm 10, advance" is four
// writes of records under 1 KB: 0.4 write units per message. The snapshot
// adds about 0.04 (payload records of 64 items compress to under 1 KB,
// status pages and member lists are one write per 256 items), so a job of
// 1,000 single-recipient items costs 0.44 WCU per message on dynalite
// (BenchmarkCostPerMessage, TestCostPerMessage). Index writes, which
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
// Known limits: items of a shard interleaved with many other shards' share
// blocks with them, so a status page holds fewer of the shard's items (the
// storetest fixtures deal seqs round-robin); a claim never spans pages, so
// it returns at most the due items of one page. PutItems of the same job
// must not run concurrently on overlapping blocks with different content
// (each write is conditional, so a race is retried, never lost). ClaimID
// and SubmittedAt are kept only while an item is submitted. The index
// queries are eventually consistent on AWS: a page just changed may be
// missed by one claim or listing, never claimed twice (the page write is
// conditional).
package dynamostore
