package dynamostore

import (
	"sort"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// updateBuilder assembles an UpdateExpression.
type updateBuilder struct {
	set, add, remove []string
	names            map[string]string
	values           map[string]types.AttributeValue
}

func newUpdate() *updateBuilder {
	return &updateBuilder{names: map[string]string{}, values: map[string]types.AttributeValue{}}
}

func (u *updateBuilder) name(attr string) string {
	n := "#n" + strconv.Itoa(len(u.names))
	for k, v := range u.names {
		if v == attr {
			return k
		}
	}
	u.names[n] = attr
	return n
}

func (u *updateBuilder) value(v types.AttributeValue) string {
	n := ":v" + strconv.Itoa(len(u.values))
	u.values[n] = v
	return n
}

func (u *updateBuilder) Set(attr string, v types.AttributeValue) {
	u.set = append(u.set, u.name(attr)+" = "+u.value(v))
}

func (u *updateBuilder) Add(attr string, n int64) {
	if n != 0 {
		u.add = append(u.add, u.name(attr)+" "+u.value(attrN(n)))
	}
}

func (u *updateBuilder) Remove(attr string) { u.remove = append(u.remove, u.name(attr)) }

func (u *updateBuilder) expr() string {
	var parts []string
	if len(u.set) > 0 {
		parts = append(parts, "SET "+strings.Join(u.set, ", "))
	}
	if len(u.add) > 0 {
		parts = append(parts, "ADD "+strings.Join(u.add, ", "))
	}
	if len(u.remove) > 0 {
		parts = append(parts, "REMOVE "+strings.Join(u.remove, ", "))
	}
	return strings.Join(parts, " ")
}

func (u *updateBuilder) input(jobID string, index int, cond string) *dynamodb.UpdateItemInput {
	in := &dynamodb.UpdateItemInput{
		Key:                       key(jobPK(jobID), skShard(index)),
		UpdateExpression:          aws.String(u.expr()),
		ExpressionAttributeNames:  u.names,
		ExpressionAttributeValues: u.values,
	}
	if cond != "" {
		in.ConditionExpression = aws.String(cond)
	}
	return in
}

func (u *updateBuilder) addDelta(d store.Counts, failures map[string]int64) {
	for i, v := range countValues(d) {
		u.Add(countAttrs[i], v)
	}
	cats := make([]string, 0, len(failures))
	for c := range failures {
		cats = append(cats, c)
	}
	sort.Strings(cats)
	for _, c := range cats {
		u.Add(failurePrefix+c, failures[c])
	}
	u.Add("sv", 1)
}

// setRecount replaces the counts and failure counters of rec and starts
// the next count epoch. The write must be conditional on rec's version
// (sv), so that no delta folded since rec was read is overwritten.
func (u *updateBuilder) setRecount(rec map[string]types.AttributeValue, c store.Counts, failures map[string]int64) {
	u.Set("epoch", attrN(getN(rec, "epoch")+1))
	for i, v := range countValues(c) {
		u.Set(countAttrs[i], attrN(v))
	}
	for name := range rec {
		if cat, ok := strings.CutPrefix(name, failurePrefix); ok && failures[cat] == 0 {
			u.Remove(name)
		}
	}
	for cat, n := range failures {
		if n != 0 {
			u.Set(failurePrefix+cat, attrN(n))
		}
	}
}
