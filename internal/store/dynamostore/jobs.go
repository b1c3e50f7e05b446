package dynamostore

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

func jobItem(j store.Job) map[string]types.AttributeValue {
	m := map[string]types.AttributeValue{
		attrPK: attrS(jobPK(j.ID)), attrSK: attrS(skJob),
		"id": attrS(j.ID), "tenant": attrS(j.Tenant), "status": attrS(string(j.Status)),
		"total": attrN(j.Total), "suppressed": attrN(j.Suppressed), "shards": attrN(int64(j.ShardCount)),
		"budget": attrN(j.Budget), "used": attrN(j.BudgetUsed), "rate": attrF(j.RatePerSec),
		"createdAt": attrN(nanos(j.CreatedAt)), "startedAt": attrN(nanos(j.StartedAt)),
		"finishedAt": attrN(nanos(j.FinishedAt)),
		"g1pk":       attrS(tenantPK(j.Tenant)),
		"g1sk":       attrS(fmt.Sprintf("%020d#%s", nanos(j.CreatedAt), j.ID)),
		"rf":         attrN(refFormatHashed),
		// Payload records sized by bytes: the width is set by the first
		// PutItems (payloadwidth.go); until then 0.
		attrDataWidth: attrN(0),
	}
	for name, v := range map[string]string{
		"name": j.Name, "tmpl": j.Template, "idem": j.IdempotencyKey, "hash": j.RequestHash,
		"pause": string(j.PauseReason), "by": j.CreatedBy,
	} {
		if v != "" {
			m[name] = attrS(v)
		}
	}
	if j.Status == store.JobStaging {
		m["g2pk"] = attrS(stagingPK)
		m["g2sk"] = attrS(stagingKey(nanos(j.CreatedAt), j.ID))
	}
	if store.JobActive(j.Status) {
		m["g4pk"], m["g4sk"] = activeKeys(j)
	}
	if j.Canary > 0 {
		m["canary"] = attrN(j.Canary)
	}
	if len(j.Meta) > 0 {
		m["meta"] = stringMap(j.Meta)
	}
	if len(j.Metadata) > 0 {
		m["md"] = stringMap(j.Metadata)
	}
	return m
}

// stringMap stores a map of strings as a map attribute.
func stringMap(sm map[string]string) types.AttributeValue {
	m := map[string]types.AttributeValue{}
	for k, v := range sm {
		m[k] = attrS(v)
	}
	return &types.AttributeValueMemberM{Value: m}
}

// getStringMap reads a map attribute of strings (nil when absent).
func getStringMap(rec map[string]types.AttributeValue, name string) map[string]string {
	mv, ok := rec[name].(*types.AttributeValueMemberM)
	if !ok || len(mv.Value) == 0 {
		return nil
	}
	out := map[string]string{}
	for k, v := range mv.Value {
		if sv, ok := v.(*types.AttributeValueMemberS); ok {
			out[k] = sv.Value
		}
	}
	return out
}

func jobFrom(m map[string]types.AttributeValue) store.Job {
	j := store.Job{
		ID: getS(m, "id"), Tenant: getS(m, "tenant"), Name: getS(m, "name"), Template: getS(m, "tmpl"),
		IdempotencyKey: getS(m, "idem"), RequestHash: getS(m, "hash"),
		Status: store.JobStatus(getS(m, "status")), PauseReason: store.PauseReason(getS(m, "pause")),
		Total: getN(m, "total"), Suppressed: getN(m, "suppressed"), ShardCount: int(getN(m, "shards")),
		Budget: getN(m, "budget"), BudgetUsed: getN(m, "used"), RatePerSec: getF(m, "rate"),
		CreatedBy: getS(m, "by"), CreatedAt: fromNanos(getN(m, "createdAt")),
		StartedAt: fromNanos(getN(m, "startedAt")), FinishedAt: fromNanos(getN(m, "finishedAt")),
	}
	j.Meta = getStringMap(m, "meta")
	j.Metadata = getStringMap(m, "md")
	j.Canary = getN(m, "canary")
	j.CanaryApproved = getN(m, "canaryOk") == 1
	j.CanaryConfirmed, j.CanaryFailed = getN(m, "canaryConf"), getN(m, "canaryFail")
	return j
}

// CreateJob writes the idempotency record first (conditional on absence),
// then the shard records and last the job record, each conditional on
// absence. A retry after a crash between those writes finds the
// idempotency record with the same hash but no job, and finishes the job
// under the recorded id.
func (s *Store) CreateJob(ctx context.Context, p store.CreateJobParams) (store.CreateJobResult, error) {
	j := p.Job
	if j.ID == "" || j.Tenant == "" {
		return store.CreateJobResult{}, fmt.Errorf("create job: %w: id and tenant are required", store.ErrInvalidArgument)
	}
	if j.ShardCount == 0 {
		j.ShardCount = len(p.Shards)
	}
	if j.ShardCount != len(p.Shards) || j.Total < 0 || j.Budget < 0 || j.RatePerSec < 0 {
		return store.CreateJobResult{}, fmt.Errorf("create job %s: %w: %d shards for shard count %d", j.ID, store.ErrInvalidArgument, len(p.Shards), j.ShardCount)
	}
	seenIndex := make([]bool, len(p.Shards))
	for _, sh := range p.Shards {
		if sh.Index < 0 || sh.Index >= len(p.Shards) || seenIndex[sh.Index] || sh.Size < 0 {
			return store.CreateJobResult{}, fmt.Errorf("create job %s: %w: shard index %d", j.ID, store.ErrInvalidArgument, sh.Index)
		}
		seenIndex[sh.Index] = true
	}
	if j.Status != store.JobStaging || len(p.Shards) > 0 {
		j.Status = store.JobCreating
	}
	// resuming: an earlier CreateJob of this key died after its idempotency
	// record, before its job record. planChanged: a shard it wrote differs
	// from this plan (the suppression list changed in between).
	var resuming bool
	var planChanged atomic.Bool
	if j.IdempotencyKey != "" {
		err := s.putItem(ctx, map[string]types.AttributeValue{
			attrPK: attrS(idemPK(j.Tenant, j.IdempotencyKey)), attrSK: attrS(skSingle),
			"job": attrS(j.ID), "hash": attrS(j.RequestHash),
		}, "attribute_not_exists(pk)", nil, nil)
		switch {
		case isConditionFailed(err):
			rec, err := s.getItem(ctx, idemPK(j.Tenant, j.IdempotencyKey), skSingle)
			if err != nil {
				return store.CreateJobResult{}, fmt.Errorf("create job: read idempotency record: %w", err)
			}
			if rec == nil {
				return store.CreateJobResult{}, fmt.Errorf("create job: idempotency record vanished: %w", store.ErrConflict)
			}
			if getS(rec, "hash") != j.RequestHash {
				return store.CreateJobResult{}, fmt.Errorf("create job: idempotency key %q used with another request: %w", j.IdempotencyKey, store.ErrConflict)
			}
			existing, err := s.GetJob(ctx, getS(rec, "job"))
			if err == nil {
				return store.CreateJobResult{Job: existing.Job}, nil
			}
			if !errors.Is(err, store.ErrNotFound) {
				return store.CreateJobResult{}, err
			}
			j.ID = getS(rec, "job") // finish the interrupted creation
			resuming = true
		case err != nil:
			return store.CreateJobResult{}, fmt.Errorf("create job: idempotency record: %w", err)
		}
	}
	err := s.parallel(ctx, len(p.Shards), func(ctx context.Context, i int) error {
		sh := p.Shards[i]
		sh.JobID = j.ID
		if sh.Status == "" {
			sh.Status = store.ShardPending
		}
		if sh.Counts.IsZero() {
			sh.Counts.Pending = sh.Size
		}
		if sh.SlowFactor == 0 {
			sh.SlowFactor = 1
		}
		err := s.putItem(ctx, shardItem(sh), "attribute_not_exists(pk)", nil, nil)
		if isConditionFailed(err) {
			// Written by an earlier, interrupted attempt (or a concurrent
			// one): for another plan, the job is not this attempt's to
			// create, and the caller's same-plan check must see it, as it
			// does on a store that creates a job atomically.
			if resuming {
				old, err := s.GetShard(ctx, j.ID, sh.Index)
				if err != nil {
					return fmt.Errorf("read shard %d of the interrupted creation: %w", sh.Index, err)
				}
				if old.Account != sh.Account || old.Size != sh.Size {
					planChanged.Store(true)
				}
			}
			return nil
		}
		return err
	})
	if err != nil {
		return store.CreateJobResult{}, fmt.Errorf("create job %s: shards: %w", j.ID, err)
	}
	err = s.putItem(ctx, jobItem(j), "attribute_not_exists(pk)", nil, nil)
	if isConditionFailed(err) {
		existing, err := s.GetJob(ctx, j.ID)
		if err != nil {
			return store.CreateJobResult{}, err
		}
		if existing.Job.IdempotencyKey != j.IdempotencyKey || existing.Job.RequestHash != j.RequestHash {
			return store.CreateJobResult{}, fmt.Errorf("create job %s: id already used: %w", j.ID, store.ErrConflict)
		}
		return store.CreateJobResult{Job: existing.Job}, nil
	}
	if err != nil {
		return store.CreateJobResult{}, fmt.Errorf("create job %s: %w", j.ID, err)
	}
	return store.CreateJobResult{Job: jobFrom(jobItem(j)), Created: !planChanged.Load()}, nil
}

// parallel runs fn(0..n-1) with bounded concurrency and returns the first
// error.
func (s *Store) parallel(ctx context.Context, n int, fn func(ctx context.Context, i int) error) error {
	if n == 1 {
		return fn(ctx, 0)
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
		sem   = make(chan struct{}, 8)
	)
	for i := 0; i < n; i++ {
		sem <- struct{}{}
		wg.Add(1)
		go func(i int) {
			defer func() { <-sem; wg.Done() }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}(i)
	}
	wg.Wait()
	return first
}

// GetJob reads the job record and its shard records with one Query over
// the sort keys "J" … "K#~".
func (s *Store) GetJob(ctx context.Context, jobID string) (store.JobView, error) {
	if jobID == "" {
		return store.JobView{}, fmt.Errorf("job: %w", store.ErrNotFound)
	}
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(jobPK(jobID)), ":a": attrS(skJob), ":b": attrS("K#~"),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return store.JobView{}, fmt.Errorf("get job %s: %w", jobID, err)
	}
	var v store.JobView
	found := false
	for _, r := range recs {
		if getS(r, attrSK) == skJob {
			v.Job, found = jobFrom(r), true
		} else {
			v.Shards = append(v.Shards, shardFrom(r))
		}
	}
	if !found {
		return store.JobView{}, fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
	}
	sort.Slice(v.Shards, func(a, b int) bool { return v.Shards[a].Index < v.Shards[b].Index })
	return v, nil
}

// GetJobRecord reads the job record alone (one GetItem, whatever the
// number of shards).
func (s *Store) GetJobRecord(ctx context.Context, jobID string) (store.Job, error) {
	return s.getJobRecord(ctx, jobID)
}

func (s *Store) getJobRecord(ctx context.Context, jobID string) (store.Job, error) {
	j, _, err := s.getJobAndRefFormat(ctx, jobID)
	return j, err
}

// getJobAndRefFormat is getJobRecord that also says whether the job's
// reference look-up records are hashed (hashrefs.go: jobs created since
// rf was written) or R# records (refs.go).
func (s *Store) getJobAndRefFormat(ctx context.Context, jobID string) (store.Job, bool, error) {
	j, l, err := s.getJobLayout(ctx, jobID)
	return j, l.hashedRefs, err
}

// jobLayout is how a job's item records are laid out, from its job record.
type jobLayout struct {
	// hashedRefs: reference look-up records are H# (hashrefs.go), not R#.
	hashedRefs bool
	// dataWidth is the seq range of its payload records; 0 while the
	// first PutItems has not sized them (payloadwidth.go).
	dataWidth int64
}

// getJobLayout reads the job record: the job and the layout of its items.
func (s *Store) getJobLayout(ctx context.Context, jobID string) (store.Job, jobLayout, error) {
	if jobID == "" {
		return store.Job{}, jobLayout{}, fmt.Errorf("job: %w", store.ErrNotFound)
	}
	rec, err := s.getItem(ctx, jobPK(jobID), skJob)
	if err != nil {
		return store.Job{}, jobLayout{}, fmt.Errorf("read job %s: %w", jobID, err)
	}
	if rec == nil {
		return store.Job{}, jobLayout{}, fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
	}
	return jobFrom(rec), jobLayout{hashedRefs: getN(rec, "rf") == refFormatHashed, dataWidth: recordDataWidth(rec)}, nil
}

// ListJobs queries the tenantJobs index newest first and reads the job
// records with BatchGetItem; the cursor is the index key of the last job.
func (s *Store) ListJobs(ctx context.Context, p store.ListJobsParams) (store.ListJobsResult, error) {
	limit := p.Limit
	if limit <= 0 {
		limit = 50
	}
	in := &dynamodb.QueryInput{
		IndexName:              aws.String(indexTenantJobs),
		KeyConditionExpression: aws.String("g1pk = :pk"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(tenantPK(p.Tenant)),
		},
		ScanIndexForward: aws.Bool(false),
	}
	if p.Cursor != "" {
		var c keyCursor
		if err := decodeCursor(p.Cursor, &c); err != nil {
			return store.ListJobsResult{}, err
		}
		// A cursor is ours only if it names a job key of this tenant's
		// index: anything else would reach DynamoDB as a malformed start
		// key (a 500), or page through another partition.
		if len(c) != 4 || c["g1pk"] != tenantPK(p.Tenant) || c["g1sk"] == "" || !strings.HasPrefix(c[attrPK], "JOB#") || c[attrSK] != skJob {
			return store.ListJobsResult{}, fmt.Errorf("%w: bad cursor", store.ErrInvalidArgument)
		}
		in.ExclusiveStartKey = c.key()
	}
	keys, err := s.query(ctx, in, limit+1)
	if err != nil {
		return store.ListJobsResult{}, fmt.Errorf("list jobs of %s: %w", p.Tenant, err)
	}
	var res store.ListJobsResult
	if len(keys) > limit {
		keys = keys[:limit]
		if res.NextCursor, err = encodeCursor(toKeyCursor(keys[limit-1])); err != nil {
			return store.ListJobsResult{}, err
		}
	}
	ks := make([]map[string]types.AttributeValue, len(keys))
	for i, k := range keys {
		ks[i] = key(getS(k, attrPK), getS(k, attrSK))
	}
	recs, err := s.batchGet(ctx, ks, true)
	if err != nil {
		return store.ListJobsResult{}, fmt.Errorf("list jobs of %s: %w", p.Tenant, err)
	}
	res.Jobs = []store.Job{}
	for _, k := range ks {
		if r, ok := recs[recordID(k)]; ok {
			res.Jobs = append(res.Jobs, jobFrom(r))
		}
	}
	return res, nil
}

// TransitionJob reads the job and writes the new status on condition that
// the status is still the one read.
func (s *Store) TransitionJob(ctx context.Context, p store.TransitionJobParams) (store.Job, error) {
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		j, err := s.getJobRecord(ctx, p.JobID)
		if err != nil {
			return store.Job{}, err
		}
		if (len(p.From) > 0 && !slices.Contains(p.From, j.Status)) || !store.JobTransitionAllowed(j.Status, p.To) {
			return store.Job{}, fmt.Errorf("job %s %s → %s: %w", p.JobID, j.Status, p.To, store.ErrInvalidTransition)
		}
		cond := "#st = :from"
		if p.FromPauseReason != "" {
			if j.Status != store.JobPaused || j.PauseReason != p.FromPauseReason {
				return store.Job{}, fmt.Errorf("job %s is not paused for %s: %w", p.JobID, p.FromPauseReason, store.ErrInvalidTransition)
			}
			cond += " AND pause = :fpr"
		}
		set := []string{"#st = :to"}
		remove := []string{}
		values := map[string]types.AttributeValue{":to": attrS(string(p.To)), ":from": attrS(string(j.Status))}
		if p.FromPauseReason != "" {
			values[":fpr"] = attrS(string(p.FromPauseReason))
		}
		if p.To == store.JobPaused && p.PauseReason != "" {
			set = append(set, "pause = :pr")
			values[":pr"] = attrS(string(p.PauseReason))
		} else if p.To != store.JobPaused {
			remove = append(remove, "pause")
		}
		switch {
		case j.Status == store.JobStaging && p.To == store.JobStarting:
			set = append(set, "g2pk = :stpk") // from the staging index to the starting one
			values[":stpk"] = attrS(startingPK)
		case store.JobFinal(p.To):
			// Into the expiry index (retention.go), from the staging or
			// starting one if there.
			set = append(set, "g2pk = :xpk", "g2sk = :xsk")
			values[":xpk"], values[":xsk"] = expiryIndexKeys(p.At, p.JobID)
		case j.Status == store.JobStaging, j.Status == store.JobStarting, store.JobFinal(j.Status):
			// Leaves the staging (starting) index, or, re-opened, the
			// expiry index.
			remove = append(remove, "g2pk", "g2sk", "xc")
		}
		switch {
		case store.JobActive(p.To): // counted by the running-jobs quota (quota.go)
			set = append(set, "g4pk = :apk", "g4sk = :ask")
			values[":apk"], values[":ask"] = activeKeys(j)
		case store.JobActive(j.Status):
			remove = append(remove, "g4pk", "g4sk")
		}
		if p.ApproveCanary && j.Status == store.JobPaused && j.PauseReason == store.PauseCanary {
			// The pause reason cannot change while the status stays paused,
			// but a resume and a new pause could come in between: condition
			// on it.
			set = append(set, "canaryOk = :one", "canaryConf = :cc", "canaryFail = :cf")
			cond += " AND pause = :canary"
			values[":one"], values[":cc"], values[":cf"] = attrN(1), attrN(p.CanaryConfirmed), attrN(p.CanaryFailed)
			values[":canary"] = attrS(string(store.PauseCanary))
		}
		if p.To == store.JobRunning && j.StartedAt.IsZero() {
			set = append(set, "startedAt = :at")
			values[":at"] = attrN(nanos(p.At))
		}
		if store.JobFinal(p.To) {
			set = append(set, "finishedAt = :at")
			values[":at"] = attrN(nanos(p.At))
		}
		expr := "SET " + join(set)
		if len(remove) > 0 {
			expr += " REMOVE " + join(remove)
		}
		rec, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
			Key:                       key(jobPK(p.JobID), skJob),
			UpdateExpression:          aws.String(expr),
			ConditionExpression:       aws.String(cond),
			ExpressionAttributeNames:  map[string]string{"#st": "status"},
			ExpressionAttributeValues: values,
		})
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			return store.Job{}, fmt.Errorf("transition job %s: %w", p.JobID, err)
		}
		return jobFrom(rec), nil
	}
	return store.Job{}, fmt.Errorf("transition job %s: %w", p.JobID, store.ErrConflict)
}

func join(parts []string) string {
	out := ""
	for i, p := range parts {
		if i > 0 {
			out += ", "
		}
		out += p
	}
	return out
}

// payload is one item's write-once data inside a payload record.
type payload struct {
	To   string            `json:"t"`
	Vars map[string]string `json:"v,omitempty"`
	Ref  string            `json:"r,omitempty"`
}

// PutItems merges the page into the member records, status pages and
// payload records it touches: it reads them (BatchGetItem), adds the new
// seqs, and writes back each changed record with a conditional PutItem on
// its version, redoing everything on a lost race. Records already holding
// the same seqs are not rewritten, so redoing an interrupted submit costs
// reads only.
func (s *Store) PutItems(ctx context.Context, p store.PutItemsParams) error {
	if p.JobID == "" || len(p.Items) > store.MaxPutItems {
		return fmt.Errorf("put items: %w: job id and at most %d items", store.ErrInvalidArgument, store.MaxPutItems)
	}
	if len(p.Items) == 0 {
		return nil
	}
	j, layout, err := s.getJobLayout(ctx, p.JobID)
	if err != nil {
		return err
	}
	if j.Status != store.JobCreating && j.Status != store.JobStarting {
		return fmt.Errorf("put items into job %s in status %s: %w", p.JobID, j.Status, store.ErrInvalidTransition)
	}
	seen := map[int64]bool{}
	for _, it := range p.Items {
		if it.Seq < 0 || it.Shard < 0 || (it.Shard >= j.ShardCount && j.Status == store.JobCreating) || seen[it.Seq] {
			return fmt.Errorf("put items into job %s: %w: item seq %d shard %d", p.JobID, store.ErrInvalidArgument, it.Seq, it.Shard)
		}
		seen[it.Seq] = true
	}
	if layout.dataWidth == 0 {
		if layout.dataWidth, err = s.sizePayloads(ctx, j, p.Items); err != nil {
			return fmt.Errorf("put items into job %s: %w", p.JobID, err)
		}
	}
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		err := s.putItemsOnce(ctx, p, layout)
		if !isConditionFailed(err) {
			if err != nil {
				return fmt.Errorf("put items into job %s: %w", p.JobID, err)
			}
			return nil
		}
	}
	return fmt.Errorf("put items into job %s: %w", p.JobID, store.ErrConflict)
}

type pageKey struct {
	shard int
	block int64
}

func (s *Store) putItemsOnce(ctx context.Context, p store.PutItemsParams, layout jobLayout) error {
	hashedRefs, width := layout.hashedRefs, layout.dataWidth
	pk := jobPK(p.JobID)
	pages := map[pageKey][]store.Item{}
	datas := map[int64][]store.Item{}
	refs := map[refKey]map[string][]refEntry{}
	hrefs := map[refKey][]hashedRefEntry{}
	for _, it := range p.Items {
		k := pageKey{it.Shard, it.Seq / pageWidth}
		pages[k] = append(pages[k], it)
		datas[it.Seq/width] = append(datas[it.Seq/width], it)
		if it.Ref != "" && hashedRefs {
			h := refHash(it.Ref)
			rk := refKey{hashedRefBucket(h), it.Seq / refWidth}
			hrefs[rk] = append(hrefs[rk], hashedRefEntry{seq: it.Seq, shard: it.Shard, tag: refTag(h)})
		} else if it.Ref != "" {
			rk := refKey{refBucket(it.Ref), it.Seq / refWidth}
			if refs[rk] == nil {
				refs[rk] = map[string][]refEntry{}
			}
			refs[rk][it.Ref] = append(refs[rk][it.Ref], refEntry{seq: it.Seq, shard: it.Shard})
		}
	}
	var keys []map[string]types.AttributeValue
	for k := range pages {
		keys = append(keys, key(pk, skMembers(k.shard, k.block)), key(pk, skPage(k.shard, k.block)))
	}
	for d := range datas {
		keys = append(keys, key(pk, skData(d)))
	}
	for rk := range refs {
		keys = append(keys, key(pk, skRef(rk)))
	}
	for rk := range hrefs {
		keys = append(keys, key(pk, skHashedRef(rk)))
	}
	existing, err := s.batchGet(ctx, keys, true)
	if err != nil {
		return err
	}
	type write struct {
		item map[string]types.AttributeValue
		cond string
		vals map[string]types.AttributeValue
	}
	var writes []write
	versioned := func(item, old map[string]types.AttributeValue) write {
		if old == nil {
			item["v"] = attrN(1)
			return write{item: item, cond: "attribute_not_exists(pk)"}
		}
		v := getN(old, "v")
		item["v"] = attrN(v + 1)
		return write{item: item, cond: "v = :v", vals: map[string]types.AttributeValue{":v": attrN(v)}}
	}
	// Status pages are written after their member lists (second round), so a
	// page never counts members its member list lacks.
	var pageWrites []write
	for k, items := range pages {
		mKey := key(pk, skMembers(k.shard, k.block))
		oldM := existing[recordID(mKey)]
		var seqs []int64
		if oldM != nil {
			if seqs, err = decodeMembers(k.block, getS(oldM, "m")); err != nil {
				return err
			}
		}
		merged := slices.Clone(seqs)
		for _, it := range items {
			if i, found := slices.BinarySearch(merged, it.Seq); !found {
				merged = slices.Insert(merged, i, it.Seq)
			}
		}
		if len(merged) != len(seqs) {
			m := map[string]types.AttributeValue{
				attrPK: attrS(pk), attrSK: attrS(skMembers(k.shard, k.block)),
				"m": attrS(encodeMembers(k.block, merged)), "a": attrS(items[0].Account), "n": attrN(int64(len(merged))),
			}
			if width != dataWidth { // the readers of the page's items find their payloads by it
				m[attrDataWidth] = attrN(width)
			}
			writes = append(writes, versioned(m, oldM))
		}
		pKey := key(pk, skPage(k.shard, k.block))
		oldP := existing[recordID(pKey)]
		if oldP != nil && getN(oldP, "n") == int64(len(merged)) {
			continue
		}
		pg := &page{slots: make([]slot, len(merged))}
		for i := range pg.slots {
			pg.slots[i] = slot{status: 'p', claim: -1}
		}
		pageWrites = append(pageWrites, versioned(s.pageItem(p.JobID, k.shard, k.block, pg), oldP))
	}
	for d, items := range datas {
		dKey := key(pk, skData(d))
		old := existing[recordID(dKey)]
		data := map[string]payload{}
		if old != nil {
			if data, err = decodePayloads(old); err != nil {
				return fmt.Errorf("payload record %d: %w", d, err)
			}
		}
		changed := false
		for _, it := range items {
			k := strconv.FormatInt(it.Seq, 10)
			pl := payload{To: it.To, Vars: it.Vars, Ref: it.Ref}
			if cur, ok := data[k]; !ok || cur.To != pl.To || cur.Ref != pl.Ref || !mapsEqual(cur.Vars, pl.Vars) {
				data[k], changed = pl, true
			}
		}
		if !changed {
			continue
		}
		z, err := encodePayloads(data)
		if err != nil {
			return err
		}
		writes = append(writes, versioned(map[string]types.AttributeValue{
			attrPK: attrS(pk), attrSK: attrS(skData(d)), "z": &types.AttributeValueMemberB{Value: z},
		}, old))
	}
	// The references of a seq block, hashed into refBuckets look-up
	// records, list their items (seq and shard), so ListItems by ref reads
	// one bucket's records and the items' pages, not the job.
	for rk, add := range refs {
		rKey := key(pk, skRef(rk))
		old := existing[recordID(rKey)]
		cur := map[string][]refEntry{}
		if old != nil {
			if cur, err = decodeRefRecord(old); err != nil {
				return fmt.Errorf("ref record %s: %w", skRef(rk), err)
			}
		}
		changed := false
		for ref, entries := range add {
			merged, ch := mergeRefEntries(cur[ref], entries)
			if ch {
				cur[ref], changed = merged, true
			}
		}
		if !changed {
			continue
		}
		z, err := encodeRefRecord(cur)
		if err != nil {
			return err
		}
		writes = append(writes, versioned(map[string]types.AttributeValue{
			attrPK: attrS(pk), attrSK: attrS(skRef(rk)), "z": &types.AttributeValueMemberB{Value: z},
		}, old))
	}
	for rk, add := range hrefs {
		slices.SortFunc(add, func(a, b hashedRefEntry) int { return cmp.Compare(a.seq, b.seq) })
		hKey := key(pk, skHashedRef(rk))
		old := existing[recordID(hKey)]
		cur, err := hashedRefsOf(old, rk.block)
		if err != nil {
			return fmt.Errorf("hashed ref record %s: %w", skHashedRef(rk), err)
		}
		merged, changed := mergeHashedRefs(cur, add)
		if !changed {
			continue
		}
		writes = append(writes, versioned(map[string]types.AttributeValue{
			attrPK: attrS(pk), attrSK: attrS(skHashedRef(rk)), "h": &types.AttributeValueMemberB{Value: encodeHashedRefs(rk.block, merged)},
		}, old))
	}
	for _, round := range [][]write{writes, pageWrites} {
		err := s.parallel(ctx, len(round), func(ctx context.Context, i int) error {
			return s.putItem(ctx, round[i].item, round[i].cond, nil, round[i].vals)
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// encodePayloads renders a payload record's items as deflated JSON: the
// snapshot is most of the bytes written per message, and recipients and
// variables compress well.
func encodePayloads(data map[string]payload) ([]byte, error) {
	return deflateJSON(data)
}

func decodePayloads(rec map[string]types.AttributeValue) (map[string]payload, error) {
	data := map[string]payload{}
	z, ok := rec["z"].(*types.AttributeValueMemberB)
	if !ok {
		return data, nil
	}
	if err := inflateJSON(z.Value, &data); err != nil {
		return nil, err
	}
	return data, nil
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

var _ store.IdempotencyLookup = (*Store)(nil)

// JobByIdempotencyKey reads the key's idempotency record, then its job.
func (s *Store) JobByIdempotencyKey(ctx context.Context, tenant, key string) (store.Job, error) {
	if key == "" {
		return store.Job{}, fmt.Errorf("job by idempotency key: %w", store.ErrNotFound)
	}
	rec, err := s.getItem(ctx, idemPK(tenant, key), skSingle)
	if err != nil {
		return store.Job{}, fmt.Errorf("read idempotency record: %w", err)
	}
	if rec == nil {
		return store.Job{}, fmt.Errorf("job by idempotency key: %w", store.ErrNotFound)
	}
	return s.getJobRecord(ctx, getS(rec, "job"))
}
