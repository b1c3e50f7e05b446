package dynamostore

import (
	"bytes"
	"compress/flate"
	"context"
	"fmt"
	"io"
	"sort"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.StagingStore = (*Store)(nil)

// Staged parts. A part is a small record (S#<part>: hash, counts, number
// of chunks) and its data, deflated and split into chunk records
// (T#<part>#<hash prefix>#<chunk>) of at most partChunkBytes, far below the
// 400 KB item limit. Chunks are written before the part record, which is
// conditional on absence, so a part is visible only once complete; the
// hash prefix in the chunk keys keeps a concurrent upload of another body
// from overwriting the chunks of the stored one. A staging job carries the
// running index entry g2pk = STAGING, g2sk = <createdAt 20d>#<job> until it
// leaves staging, then g2pk = STARTING (the same g2sk) while it is
// starting, so expiry and the planning watchdog read only those jobs.
const (
	partChunkBytes = 300 << 10
	skPlan         = "SP"
	stagingPK      = "STAGING"
	startingPK     = "STARTING"
)

func skPart(n int) string { return fmt.Sprintf("S#%05d", n) }
func skChunkPrefix(n int, hash string) string {
	if len(hash) > 16 {
		hash = hash[:16]
	}
	return fmt.Sprintf("T#%05d#%s#", n, hash)
}

func partInfoFrom(rec map[string]types.AttributeValue) store.PartInfo {
	return store.PartInfo{
		Number: int(getN(rec, "part")), Hash: getS(rec, "hash"), Recipients: int(getN(rec, "n")),
		Bytes: getN(rec, "bytes"), CreatedAt: fromNanos(getN(rec, "at")),
	}
}

// PutPart writes the chunks, then the part record (attribute_not_exists).
func (s *Store) PutPart(ctx context.Context, p store.Part) (store.PutPartResult, error) {
	if p.JobID == "" || p.Number < 1 || p.Number > store.MaxPartNumber || p.Hash == "" || p.Recipients < 0 || p.Bytes < 0 {
		return store.PutPartResult{}, fmt.Errorf("put part: %w: job id, part 1..%d and hash are required", store.ErrInvalidArgument, store.MaxPartNumber)
	}
	pk := jobPK(p.JobID)
	if rec, err := s.getItem(ctx, pk, skPart(p.Number)); err != nil {
		return store.PutPartResult{}, fmt.Errorf("put part %d of job %s: %w", p.Number, p.JobID, err)
	} else if rec != nil {
		return existingPart(p, rec)
	}
	var buf bytes.Buffer
	zw, _ := flate.NewWriter(&buf, flate.BestSpeed)
	if _, err := zw.Write(p.Data); err != nil {
		return store.PutPartResult{}, fmt.Errorf("put part %d: compress: %w", p.Number, err)
	}
	if err := zw.Close(); err != nil {
		return store.PutPartResult{}, fmt.Errorf("put part %d: compress: %w", p.Number, err)
	}
	z := buf.Bytes()
	var reqs []types.WriteRequest
	chunks := 0
	for start := 0; start < len(z) || chunks == 0; start += partChunkBytes {
		end := min(start+partChunkBytes, len(z))
		reqs = append(reqs, types.WriteRequest{PutRequest: &types.PutRequest{Item: map[string]types.AttributeValue{
			attrPK: attrS(pk), attrSK: attrS(skChunkPrefix(p.Number, p.Hash) + fmt.Sprintf("%04d", chunks)),
			"d": &types.AttributeValueMemberB{Value: z[start:end]},
		}}})
		chunks++
	}
	// One chunk per request: BatchWriteItem takes at most 16 MB per call.
	for _, r := range reqs {
		if err := s.batchWrite(ctx, []types.WriteRequest{r}); err != nil {
			return store.PutPartResult{}, fmt.Errorf("put part %d of job %s: chunks: %w", p.Number, p.JobID, err)
		}
	}
	item := map[string]types.AttributeValue{
		attrPK: attrS(pk), attrSK: attrS(skPart(p.Number)),
		"part": attrN(int64(p.Number)), "hash": attrS(p.Hash), "n": attrN(int64(p.Recipients)),
		"bytes": attrN(p.Bytes), "at": attrN(nanos(p.CreatedAt)), "chunks": attrN(int64(chunks)),
	}
	err := s.putItem(ctx, item, "attribute_not_exists(pk)", nil, nil)
	if isConditionFailed(err) {
		rec, gerr := s.getItem(ctx, pk, skPart(p.Number))
		if gerr != nil || rec == nil {
			return store.PutPartResult{}, fmt.Errorf("put part %d of job %s: lost a race: %w", p.Number, p.JobID, store.ErrConflict)
		}
		return existingPart(p, rec)
	}
	if err != nil {
		return store.PutPartResult{}, fmt.Errorf("put part %d of job %s: %w", p.Number, p.JobID, err)
	}
	return store.PutPartResult{Part: partInfoFrom(item), Created: true}, nil
}

func existingPart(p store.Part, rec map[string]types.AttributeValue) (store.PutPartResult, error) {
	if getS(rec, "hash") != p.Hash {
		return store.PutPartResult{}, fmt.Errorf("put part %d of job %s: another body is stored: %w", p.Number, p.JobID, store.ErrConflict)
	}
	return store.PutPartResult{Part: partInfoFrom(rec)}, nil
}

// ListParts queries the part records (S#…), not their chunks.
func (s *Store) ListParts(ctx context.Context, jobID string) ([]store.PartInfo, error) {
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression: aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(jobPK(jobID)), ":a": attrS("S#"), ":b": attrS("S#~"),
		},
		ConsistentRead: aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("list parts of job %s: %w", jobID, err)
	}
	out := make([]store.PartInfo, 0, len(recs))
	for _, r := range recs {
		out = append(out, partInfoFrom(r))
	}
	sort.Slice(out, func(a, b int) bool { return out[a].Number < out[b].Number })
	return out, nil
}

// ReadPart reads the part record, then its chunks in order.
func (s *Store) ReadPart(ctx context.Context, jobID string, number int) ([]byte, error) {
	pk := jobPK(jobID)
	rec, err := s.getItem(ctx, pk, skPart(number))
	if err != nil {
		return nil, fmt.Errorf("read part %d of job %s: %w", number, jobID, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("part %d of job %s: %w", number, jobID, store.ErrNotFound)
	}
	prefix := skChunkPrefix(number, getS(rec, "hash"))
	chunks, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk AND begins_with(sk, :p)"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(pk), ":p": attrS(prefix)},
		ConsistentRead:            aws.Bool(true),
	}, 0)
	if err != nil {
		return nil, fmt.Errorf("read part %d of job %s: %w", number, jobID, err)
	}
	if int64(len(chunks)) != getN(rec, "chunks") {
		return nil, fmt.Errorf("read part %d of job %s: %d chunks of %d", number, jobID, len(chunks), getN(rec, "chunks"))
	}
	var z bytes.Buffer
	for _, c := range chunks {
		if b, ok := c["d"].(*types.AttributeValueMemberB); ok {
			z.Write(b.Value)
		}
	}
	data, err := io.ReadAll(flate.NewReader(&z))
	if err != nil {
		return nil, fmt.Errorf("read part %d of job %s: inflate: %w", number, jobID, err)
	}
	return data, nil
}

// DeleteParts deletes the part records, chunks and checkpoint (Query of
// keys, BatchWriteItem of deletes).
func (s *Store) DeleteParts(ctx context.Context, jobID string) error {
	pk := jobPK(jobID)
	var reqs []types.WriteRequest
	for _, r := range [][2]string{{"S#", "T#~"}} { // SP sorts in between
		recs, err := s.query(ctx, &dynamodb.QueryInput{
			KeyConditionExpression:    aws.String("pk = :pk AND sk BETWEEN :a AND :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(pk), ":a": attrS(r[0]), ":b": attrS(r[1])},
			ProjectionExpression:      aws.String("pk, sk"),
		}, 0)
		if err != nil {
			return fmt.Errorf("delete parts of job %s: %w", jobID, err)
		}
		for _, k := range recs {
			reqs = append(reqs, types.WriteRequest{DeleteRequest: &types.DeleteRequest{Key: key(pk, getS(k, attrSK))}})
		}
	}
	if err := s.batchWrite(ctx, reqs); err != nil {
		return fmt.Errorf("delete parts of job %s: %w", jobID, err)
	}
	return nil
}

// GetPlanState reads the checkpoint record.
func (s *Store) GetPlanState(ctx context.Context, jobID string) (store.PlanState, error) {
	rec, err := s.getItem(ctx, jobPK(jobID), skPlan)
	if err != nil {
		return store.PlanState{}, fmt.Errorf("read plan of job %s: %w", jobID, err)
	}
	if rec == nil {
		return store.PlanState{}, fmt.Errorf("plan of job %s: %w", jobID, store.ErrNotFound)
	}
	ps := store.PlanState{JobID: jobID, Version: getN(rec, "v")}
	if b, ok := rec["state"].(*types.AttributeValueMemberB); ok {
		ps.State = b.Value
	}
	return ps, nil
}

// SavePlanState puts the checkpoint conditional on the version read.
func (s *Store) SavePlanState(ctx context.Context, p store.PlanState) (store.PlanState, error) {
	if p.JobID == "" || p.Version < 0 {
		return store.PlanState{}, fmt.Errorf("save plan: %w: job id required", store.ErrInvalidArgument)
	}
	state := p.State
	if state == nil {
		state = []byte{}
	}
	item := map[string]types.AttributeValue{
		attrPK: attrS(jobPK(p.JobID)), attrSK: attrS(skPlan), "v": attrN(p.Version + 1),
		"state": &types.AttributeValueMemberB{Value: state},
	}
	cond, vals := "attribute_not_exists(pk)", map[string]types.AttributeValue(nil)
	if p.Version > 0 {
		cond, vals = "v = :v", map[string]types.AttributeValue{":v": attrN(p.Version)}
	}
	err := s.putItem(ctx, item, cond, nil, vals)
	if isConditionFailed(err) {
		return store.PlanState{}, fmt.Errorf("save plan of job %s at version %d: %w", p.JobID, p.Version, store.ErrConflict)
	}
	if err != nil {
		return store.PlanState{}, fmt.Errorf("save plan of job %s: %w", p.JobID, err)
	}
	p.Version++
	return p, nil
}

// ReleasePlannedJob puts the shard records (attribute_not_exists: a shard
// written by an interrupted release is kept), then updates the job record
// conditional on status starting.
func (s *Store) ReleasePlannedJob(ctx context.Context, p store.ReleasePlannedJobParams) (store.Job, error) {
	seen := make([]bool, len(p.Shards))
	for _, sh := range p.Shards {
		if sh.Index < 0 || sh.Index >= len(p.Shards) || seen[sh.Index] || sh.Size < 0 {
			return store.Job{}, fmt.Errorf("release job %s: %w: shard index %d", p.JobID, store.ErrInvalidArgument, sh.Index)
		}
		seen[sh.Index] = true
	}
	if p.Total < 0 || p.Suppressed < 0 {
		return store.Job{}, fmt.Errorf("release job %s: %w: negative total", p.JobID, store.ErrInvalidArgument)
	}
	j, err := s.getJobRecord(ctx, p.JobID)
	if err != nil {
		return store.Job{}, err
	}
	if j.Status != store.JobStarting {
		return store.Job{}, fmt.Errorf("release job %s in status %s: %w", p.JobID, j.Status, store.ErrInvalidTransition)
	}
	err = s.parallel(ctx, len(p.Shards), func(ctx context.Context, i int) error {
		sh := p.Shards[i]
		sh.JobID = p.JobID
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
			return nil
		}
		return err
	})
	if err != nil {
		return store.Job{}, fmt.Errorf("release job %s: shards: %w", p.JobID, err)
	}
	status, finished := store.JobRunning, int64(0)
	leave, expiry := "g2pk, g2sk", "" // leaves the starting index
	if len(p.Shards) == 0 {
		status, finished = store.JobCompleted, nanos(p.At)
		// Final: from the starting index into the expiry one
		// (retention.go), out of the active jobs (quota.go).
		leave, expiry = "g4pk, g4sk", ", g2pk = :xpk, g2sk = :xsk"
	}
	values := map[string]types.AttributeValue{
		":to": attrS(string(status)), ":from": attrS(string(store.JobStarting)),
		":t": attrN(p.Total), ":sp": attrN(p.Suppressed), ":n": attrN(int64(len(p.Shards))),
		":at": attrN(nanos(p.At)), ":fin": attrN(finished),
	}
	if expiry != "" {
		values[":xpk"], values[":xsk"] = expiryIndexKeys(p.At, p.JobID)
	}
	rec, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key: key(jobPK(p.JobID), skJob),
		UpdateExpression: aws.String("SET #st = :to, #tot = :t, #sup = :sp, #sh = :n, " +
			"startedAt = :at, finishedAt = :fin" + expiry + " REMOVE " + leave),
		ConditionExpression:       aws.String("#st = :from"),
		ExpressionAttributeNames:  map[string]string{"#st": "status", "#tot": "total", "#sup": "suppressed", "#sh": "shards"},
		ExpressionAttributeValues: values,
	})
	if isConditionFailed(err) {
		return store.Job{}, fmt.Errorf("release job %s: no longer starting: %w", p.JobID, store.ErrInvalidTransition)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("release job %s: %w", p.JobID, err)
	}
	return jobFrom(rec), nil
}

// ListStagingJobs queries the running index under g2pk = STAGING.
func (s *Store) ListStagingJobs(ctx context.Context, p store.ListStagingJobsParams) ([]store.Job, error) {
	status, pk := store.JobStaging, stagingPK
	switch p.Status {
	case "", store.JobStaging:
	case store.JobStarting:
		status, pk = store.JobStarting, startingPK
	default:
		return nil, fmt.Errorf("list staging jobs in status %q: only staging or starting", p.Status)
	}
	limit := p.Limit
	if limit <= 0 {
		limit = 100
	}
	recs, err := s.queryKeys(ctx, &dynamodb.QueryInput{
		TableName:              aws.String(s.table),
		IndexName:              aws.String(indexRunning),
		KeyConditionExpression: aws.String("g2pk = :pk AND g2sk < :up"),
		ExpressionAttributeValues: map[string]types.AttributeValue{
			":pk": attrS(pk), ":up": attrS(fmt.Sprintf("%020d", nanos(p.CreatedBefore))),
		},
		Limit: aws.Int32(int32(limit)),
	})
	if err != nil {
		return nil, fmt.Errorf("list staging jobs: %w", err)
	}
	out := []store.Job{}
	for _, r := range recs {
		if j := jobFrom(r); j.Status == status && len(out) < limit {
			out = append(out, j)
		}
	}
	return out, nil
}

func stagingKey(createdAt int64, jobID string) string {
	return fmt.Sprintf("%020d#%s", createdAt, jobID)
}
