package dynamostore

import (
	"context"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

var _ store.SeriesStore = (*Store)(nil)

// Series records: pk SERIES#<key>, sk the minute's unix seconds (12
// digits, so they sort by time), one number attribute c_<name> per
// counter, added with ADD (one write per key and minute flushed), and
// "exp" (unix seconds) a week after the minute, for a TTL on the table.
const (
	seriesCounterPrefix = "c_"
	seriesKeep          = 7 * 24 * time.Hour
)

func seriesPK(key string) string    { return "SERIES#" + key }
func skMinute(unixSec int64) string { return fmt.Sprintf("%012d", unixSec) }

// AddSeries adds counts to one minute of a series with one UpdateItem.
func (s *Store) AddSeries(ctx context.Context, p store.AddSeriesParams) error {
	if p.Key == "" {
		return fmt.Errorf("add series: %w: empty key", store.ErrInvalidArgument)
	}
	minute := p.Minute.Unix() - p.Minute.Unix()%60
	names := map[string]string{"#exp": "exp"}
	values := map[string]types.AttributeValue{":exp": attrN(minute + int64(seriesKeep/time.Second))}
	var adds []string
	keys := make([]string, 0, len(p.Counts))
	for name := range p.Counts {
		keys = append(keys, name)
	}
	sort.Strings(keys)
	for i, name := range keys {
		n := p.Counts[name]
		if name == "" || n == 0 {
			continue
		}
		ph := strconv.Itoa(i)
		names["#c"+ph] = seriesCounterPrefix + name
		values[":c"+ph] = attrN(n)
		adds = append(adds, "#c"+ph+" :c"+ph)
	}
	if len(adds) == 0 {
		return nil
	}
	_, err := s.updateItem(ctx, &dynamodb.UpdateItemInput{
		Key:                       key(seriesPK(p.Key), skMinute(minute)),
		UpdateExpression:          aws.String("SET #exp = :exp ADD " + strings.Join(adds, ", ")),
		ExpressionAttributeNames:  names,
		ExpressionAttributeValues: values,
		ReturnValues:              types.ReturnValueNone,
	})
	if err != nil {
		return mapErr(fmt.Errorf("add series %s: %w", p.Key, err))
	}
	return nil
}

// ListSeries queries the minutes of a series in [From, To).
func (s *Store) ListSeries(ctx context.Context, p store.ListSeriesParams) ([]store.SeriesPoint, error) {
	from, to := p.From.Unix(), p.To.Unix()
	if p.Key == "" || to < from || to-from > store.MaxSeriesMinutes*60+60 {
		return nil, fmt.Errorf("list series: %w: a key and at most %d minutes are required", store.ErrInvalidArgument, store.MaxSeriesMinutes)
	}
	from -= ((from % 60) + 60) % 60
	if to <= from {
		return nil, nil
	}
	recs, err := s.query(ctx, &dynamodb.QueryInput{
		KeyConditionExpression:    aws.String("pk = :pk AND sk BETWEEN :from AND :to"),
		ExpressionAttributeValues: map[string]types.AttributeValue{":pk": attrS(seriesPK(p.Key)), ":from": attrS(skMinute(from)), ":to": attrS(skMinute(to - 1))},
	}, 0)
	if err != nil {
		return nil, mapErr(fmt.Errorf("list series %s: %w", p.Key, err))
	}
	out := make([]store.SeriesPoint, 0, len(recs))
	for _, r := range recs {
		minute, err := strconv.ParseInt(getS(r, attrSK), 10, 64)
		if err != nil {
			continue
		}
		pt := store.SeriesPoint{Minute: time.Unix(minute, 0).UTC(), Counts: map[string]int64{}}
		for name := range r {
			if c, ok := strings.CutPrefix(name, seriesCounterPrefix); ok {
				if n := getN(r, name); n != 0 {
					pt.Counts[c] = n
				}
			}
		}
		out = append(out, pt)
	}
	return out, nil
}
