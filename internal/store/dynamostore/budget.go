package dynamostore

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/qunfa/qunfa/internal/store"
)

// UpdateJobLimits sets the rate cap and/or budget with one conditional
// UpdateItem.
func (s *Store) UpdateJobLimits(ctx context.Context, p store.UpdateJobLimitsParams) (store.Job, error) {
	if (p.RatePerSec != nil && *p.RatePerSec < 0) || (p.Budget != nil && *p.Budget < 0) {
		return store.Job{}, fmt.Errorf("update job %s limits: %w", p.JobID, store.ErrInvalidArgument)
	}
	if p.RatePerSec == nil && p.Budget == nil {
		return s.getJobRecord(ctx, p.JobID)
	}
	var set []string
	values := map[string]types.AttributeValue{}
	if p.RatePerSec != nil {
		set = append(set, "rate = :r")
		values[":r"] = attrF(*p.RatePerSec)
	}
	if p.Budget != nil {
		set = append(set, "budget = :b")
		values[":b"] = attrN(*p.Budget)
	}
	if p.JobID == "" {
		return store.Job{}, fmt.Errorf("job: %w", store.ErrNotFound)
	}
	// Final jobs keep their limits: the condition refuses them, and a
	// refusal is told apart from a missing job by reading it.
	finals := []store.JobStatus{store.JobCompleted, store.JobPartial, store.JobFailed, store.JobCancelled}
	var notFinal []string
	for i, st := range finals {
		name := fmt.Sprintf(":f%d", i)
		values[name] = attrS(string(st))
		notFinal = append(notFinal, name)
	}
	rec, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                       key(jobPK(p.JobID), skJob),
		UpdateExpression:          aws.String("SET " + join(set)),
		ConditionExpression:       aws.String("attribute_exists(pk) AND NOT #st IN (" + strings.Join(notFinal, ", ") + ")"),
		ExpressionAttributeNames:  map[string]string{"#st": "status"},
		ExpressionAttributeValues: values,
	})
	if isConditionFailed(err) {
		j, gerr := s.getJobRecord(ctx, p.JobID)
		if gerr != nil {
			return store.Job{}, gerr
		}
		return store.Job{}, fmt.Errorf("update job %s limits: %w: the job is %s", p.JobID, store.ErrInvalidTransition, j.Status)
	}
	if err != nil {
		return store.Job{}, fmt.Errorf("update job %s limits: %w", p.JobID, err)
	}
	return jobFrom(rec), nil
}

// ReserveBudget changes the job's used budget with one compare-and-swap
// of the usage (conditional on it and the budget being unchanged) that
// also records the request, so an SDK retry of an applied change is
// recognised. A lost race re-reads the job and retries after a jittered
// wait.
func (s *Store) ReserveBudget(ctx context.Context, jobID string, n int64) (store.BudgetGrant, error) {
	if jobID == "" {
		return store.BudgetGrant{}, fmt.Errorf("job: %w", store.ErrNotFound)
	}
	// A compare-and-swap of the used count that records a request id (see
	// requests.go): a retry of an applied update whose answer was lost
	// finds its id and is not applied twice, even if the count came back to
	// the same value meanwhile.
	rid := newRequestID()
	for attempt := 0; attempt < s.opts.MaxRetries; attempt++ {
		if attempt > 0 {
			if err := contendedBackoff(ctx, attempt); err != nil {
				return store.BudgetGrant{}, fmt.Errorf("reserve budget of %s: %w", jobID, err)
			}
		}
		rec, err := s.getItem(ctx, jobPK(jobID), skJob)
		if err != nil {
			return store.BudgetGrant{}, fmt.Errorf("read job %s: %w", jobID, err)
		}
		if rec == nil {
			return store.BudgetGrant{}, fmt.Errorf("job %s: %w", jobID, store.ErrNotFound)
		}
		if g, ok := grantedBy(rec, rid); ok {
			return budgetGrantOf(rec, g), nil
		}
		j := jobFrom(rec)
		grant := n
		switch {
		case n > 0 && j.Budget > 0:
			grant = max(0, min(n, j.Budget-j.BudgetUsed))
		case n < 0:
			grant = max(n, -j.BudgetUsed)
		}
		if grant == 0 {
			return store.BudgetGrant{Used: j.BudgetUsed, Budget: j.Budget}, nil
		}
		// The grant rides along with the id, so a retry knows what it got.
		entry := rid + "=" + strconv.FormatInt(grant, 10)
		in := &dynamodb.UpdateItemInput{
			Key:                 key(jobPK(jobID), skJob),
			ReturnValues:        types.ReturnValueNone,
			UpdateExpression:    aws.String("SET used = :new, rq = :rq"),
			ConditionExpression: aws.String("used = :old AND budget = :b"),
			ExpressionAttributeValues: map[string]types.AttributeValue{
				":new": attrN(j.BudgetUsed + grant), ":old": attrN(j.BudgetUsed), ":b": attrN(j.Budget),
				":rq": requestList(rec, entry),
			},
		}
		_, err = s.updateItem(ctx, in)
		if isConditionFailed(err) {
			continue
		}
		if err != nil {
			if again, rerr := s.getItem(ctx, jobPK(jobID), skJob); rerr == nil && again != nil {
				if g, ok := grantedBy(again, rid); ok {
					return budgetGrantOf(again, g), nil
				}
			}
			return store.BudgetGrant{}, fmt.Errorf("reserve budget of %s: %w", jobID, err)
		}
		// The condition held: the usage went from exactly old to new.
		return store.BudgetGrant{Granted: grant, Used: j.BudgetUsed + grant, Budget: j.Budget}, nil
	}
	return store.BudgetGrant{}, fmt.Errorf("reserve budget of %s: %w", jobID, store.ErrConflict)
}

// budgetGrantOf is grant g of a request found recorded in rec (a retry
// after a lost answer); the usage is rec's, which may already include
// later changes.
func budgetGrantOf(rec map[string]types.AttributeValue, g int64) store.BudgetGrant {
	return store.BudgetGrant{Granted: g, Used: getN(rec, "used"), Budget: getN(rec, "budget")}
}

// grantedBy reports the grant of budget request rid if rec records it.
func grantedBy(rec map[string]types.AttributeValue, rid string) (int64, bool) {
	for _, e := range requestsOf(rec) {
		if id, g, ok := strings.Cut(e, "="); ok && id == rid {
			n, err := strconv.ParseInt(g, 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
