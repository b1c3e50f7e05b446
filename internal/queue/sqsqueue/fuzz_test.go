package sqsqueue

import (
	"strconv"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
)

// FuzzParseMessage feeds arbitrary system attributes to parseMessage: it
// must never panic, and whatever it accepts must carry the attributes as
// given and a receive count of at least 1.
func FuzzParseMessage(f *testing.F) {
	f.Add("g", "d", "1", "1700000000000", "body")
	f.Add("acct-a#3", "job/3/0", "12", "0", `{"k":1}`)
	f.Add("", "", "-1", "x", "")
	f.Add("g", "d", "99999999999999999999", "-5", "b")
	f.Fuzz(func(t *testing.T, group, dedup, count, sent, body string) {
		m := types.Message{
			MessageId:     aws.String("m"),
			ReceiptHandle: aws.String("rh"),
			Body:          aws.String(body),
			Attributes: map[string]string{
				"MessageGroupId":          group,
				"MessageDeduplicationId":  dedup,
				"ApproximateReceiveCount": count,
				"SentTimestamp":           sent,
			},
		}
		got, err := parseMessage(m)
		if err != nil {
			return
		}
		if got.ReceiveCount < 1 {
			t.Fatalf("accepted receive count %d from %q", got.ReceiveCount, count)
		}
		if got.Group != group || got.DedupID != dedup || string(got.Body) != body || got.ID != "m" || got.ReceiptHandle != "rh" {
			t.Fatalf("parsed %+v from group %q dedup %q body %q", got, group, dedup, body)
		}
		if want, _ := strconv.ParseInt(sent, 10, 64); got.SentAt.UnixMilli() != want {
			t.Fatalf("SentAt %v (%d ms) from SentTimestamp %q", got.SentAt, got.SentAt.UnixMilli(), sent)
		}
	})
}
