package sqsqueue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
)

// These tests pin the adapter against the SQS wire contract with a fake
// endpoint: what it asks for, how it reads answers, how it maps errors.
// They need no emulator.

func TestReceiveRequestShape(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("ReceiveMessage", fakeAnswer{Body: `{}`})
	q := f.queue()

	msgs, err := q.Receive(context.Background(), queue.ReceiveParams{Max: 7, VisibilityTimeout: 1500 * time.Millisecond, Wait: 200 * time.Millisecond})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(msgs) != 0 {
		t.Fatalf("got %d messages from an empty answer", len(msgs))
	}
	calls := f.calls()
	if len(calls) != 1 || calls[0].Action != "ReceiveMessage" {
		t.Fatalf("calls = %+v, want one ReceiveMessage", calls)
	}
	b := calls[0].Body
	if got := b["MaxNumberOfMessages"]; got != float64(7) {
		t.Errorf("MaxNumberOfMessages = %v, want 7", got)
	}
	if got := b["VisibilityTimeout"]; got != float64(2) {
		t.Errorf("VisibilityTimeout = %v, want 2 (1.5 s rounded up)", got)
	}
	if got := b["WaitTimeSeconds"]; got != float64(1) {
		t.Errorf("WaitTimeSeconds = %v, want 1 (200 ms rounded up)", got)
	}
	if got, _ := b["QueueUrl"].(string); !strings.HasSuffix(got, "/q.fifo") {
		t.Errorf("QueueUrl = %q", got)
	}
	if got, _ := b["ReceiveRequestAttemptId"].(string); got == "" {
		t.Errorf("no ReceiveRequestAttemptId: an SDK retry would leave messages invisible")
	}
	names := map[string]bool{}
	list, _ := b["MessageSystemAttributeNames"].([]any)
	for _, n := range list {
		s, _ := n.(string)
		names[s] = true
	}
	for _, want := range []string{"MessageGroupId", "MessageDeduplicationId", "ApproximateReceiveCount", "SentTimestamp"} {
		if !names[want] {
			t.Errorf("MessageSystemAttributeNames %v lacks %s", list, want)
		}
	}
}

func TestReceiveAttemptIDsDiffer(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	q := f.queue()
	for range 2 {
		if _, err := q.Receive(context.Background(), queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Second}); err != nil {
			t.Fatalf("Receive: %v", err)
		}
	}
	calls := f.calls()
	if calls[0].Body["ReceiveRequestAttemptId"] == calls[1].Body["ReceiveRequestAttemptId"] {
		t.Fatalf("two Receive calls shared attempt id %v: SQS would answer the second with the first's messages", calls[0].Body["ReceiveRequestAttemptId"])
	}
}

func TestReceiveParsesFIFOAttributes(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("ReceiveMessage", fakeAnswer{Body: messagesJSON(
		fakeMessage{"m-1", "rh-1", `{"shard":3}`, map[string]string{"MessageGroupId": "acct-a#3", "MessageDeduplicationId": "job-1/3/0", "ApproximateReceiveCount": "4", "SentTimestamp": "1700000000123"}},
		fakeMessage{"m-2", "rh-2", "二", map[string]string{"MessageGroupId": "g", "MessageDeduplicationId": "d", "ApproximateReceiveCount": "1", "SentTimestamp": "1700000001000"}},
	)})
	msgs, err := f.queue().Receive(context.Background(), queue.ReceiveParams{Max: 10, VisibilityTimeout: time.Minute})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	want := []queue.Message{
		{ID: "m-1", Group: "acct-a#3", DedupID: "job-1/3/0", Body: []byte(`{"shard":3}`), ReceiptHandle: "rh-1", ReceiveCount: 4, SentAt: time.UnixMilli(1700000000123)},
		{ID: "m-2", Group: "g", DedupID: "d", Body: []byte("二"), ReceiptHandle: "rh-2", ReceiveCount: 1, SentAt: time.UnixMilli(1700000001000)},
	}
	if len(msgs) != len(want) {
		t.Fatalf("got %d messages, want %d", len(msgs), len(want))
	}
	for i := range want {
		g, w := msgs[i], want[i]
		if g.ID != w.ID || g.Group != w.Group || g.DedupID != w.DedupID || string(g.Body) != string(w.Body) ||
			g.ReceiptHandle != w.ReceiptHandle || g.ReceiveCount != w.ReceiveCount || !g.SentAt.Equal(w.SentAt) {
			t.Errorf("message %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestReceiveRefusesMessagesWithoutFIFOAttributes(t *testing.T) {
	t.Parallel()
	cases := map[string]string{
		"no group":          `{"MessageDeduplicationId":"d","ApproximateReceiveCount":"1","SentTimestamp":"1"}`,
		"no dedup id":       `{"MessageGroupId":"g","ApproximateReceiveCount":"1","SentTimestamp":"1"}`,
		"no receive count":  `{"MessageGroupId":"g","MessageDeduplicationId":"d","SentTimestamp":"1"}`,
		"bad receive count": `{"MessageGroupId":"g","MessageDeduplicationId":"d","ApproximateReceiveCount":"0","SentTimestamp":"1"}`,
		"bad sent time":     `{"MessageGroupId":"g","MessageDeduplicationId":"d","ApproximateReceiveCount":"1","SentTimestamp":"yesterday"}`,
	}
	receive := func(t *testing.T, attrs string) error {
		f := newFakeSQS(t)
		f.answer("ReceiveMessage", fakeAnswer{Body: `{"Messages":[{"MessageId":"m","ReceiptHandle":"rh","Body":"b","Attributes":` + attrs + `}]}`})
		_, err := f.queue().Receive(context.Background(), queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Second})
		return err
	}
	// The control: the same answer with every attribute is accepted.
	if err := receive(t, `{"MessageGroupId":"g","MessageDeduplicationId":"d","ApproximateReceiveCount":"1","SentTimestamp":"1"}`); err != nil {
		t.Fatalf("complete message refused: %v", err)
	}
	for name, attrs := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			if err := receive(t, attrs); err == nil {
				t.Fatal("Receive accepted a message without its FIFO attributes")
			}
		})
	}
}

func TestReceiveZeroVisibilityReleasesMessages(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("ReceiveMessage", fakeAnswer{Body: `{"Messages":[
		{"MessageId":"m-1","ReceiptHandle":"rh-1","Body":"a","Attributes":{"MessageGroupId":"g","MessageDeduplicationId":"d1","ApproximateReceiveCount":"1","SentTimestamp":"1"}},
		{"MessageId":"m-2","ReceiptHandle":"rh-2","Body":"b","Attributes":{"MessageGroupId":"g","MessageDeduplicationId":"d2","ApproximateReceiveCount":"1","SentTimestamp":"1"}}
	]}`})
	f.answer("ChangeMessageVisibilityBatch", fakeAnswer{Body: `{"Successful":[{"Id":"0"},{"Id":"1"}],"Failed":[]}`})
	msgs, err := f.queue().Receive(context.Background(), queue.ReceiveParams{Max: 2})
	if err != nil {
		t.Fatalf("Receive: %v", err)
	}
	if len(msgs) != 2 {
		t.Fatalf("got %d messages, want 2", len(msgs))
	}
	calls := f.calls()
	if len(calls) != 2 || calls[1].Action != "ChangeMessageVisibilityBatch" {
		t.Fatalf("calls = %+v, want ReceiveMessage then ChangeMessageVisibilityBatch", calls)
	}
	if _, sent := calls[0].Body["VisibilityTimeout"]; sent {
		t.Errorf("ReceiveMessage carried VisibilityTimeout %v; the SDK omits 0", calls[0].Body["VisibilityTimeout"])
	}
	entries, _ := calls[1].Body["Entries"].([]any)
	if len(entries) != 2 {
		t.Fatalf("batch entries = %v, want 2", entries)
	}
	for i, e := range entries {
		m, _ := e.(map[string]any)
		if m["ReceiptHandle"] != msgs[i].ReceiptHandle || m["VisibilityTimeout"] != float64(0) {
			t.Errorf("entry %d = %v, want handle %s visibility 0", i, m, msgs[i].ReceiptHandle)
		}
	}
}

func TestReceiveZeroVisibilityReportsFailedRelease(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("ReceiveMessage", fakeAnswer{Body: `{"Messages":[
		{"MessageId":"m-1","ReceiptHandle":"rh-1","Body":"a","Attributes":{"MessageGroupId":"g","MessageDeduplicationId":"d1","ApproximateReceiveCount":"1","SentTimestamp":"1"}}]}`})
	f.answer("ChangeMessageVisibilityBatch", fakeAnswer{Body: `{"Successful":[],"Failed":[{"Id":"0","Code":"ReceiptHandleIsInvalid","Message":"nope","SenderFault":true}]}`})
	if _, err := f.queue().Receive(context.Background(), queue.ReceiveParams{Max: 1}); err == nil {
		t.Fatal("Receive hid a failed release of a zero-visibility message")
	}
}

func TestSecondsRoundUp(t *testing.T) {
	t.Parallel()
	cases := []struct {
		d       time.Duration
		want    int32
		invalid bool
	}{
		{0, 0, false},
		{time.Nanosecond, 1, false},
		{999 * time.Millisecond, 1, false},
		{time.Second, 1, false},
		{time.Second + time.Nanosecond, 2, false},
		{20 * time.Second, 20, false},
		{20*time.Second + time.Millisecond, 0, true},
		{-time.Nanosecond, 0, true},
	}
	for _, c := range cases {
		got, err := seconds("wait", c.d, queue.MaxWait)
		if c.invalid {
			if !errors.Is(err, queue.ErrInvalidArgument) {
				t.Errorf("seconds(%v) err = %v, want ErrInvalidArgument", c.d, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("seconds(%v) = %d, %v; want %d", c.d, got, err, c.want)
		}
	}
}

func TestChangeVisibilityRoundsUp(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	q := f.queue()
	for _, d := range []time.Duration{0, 10 * time.Millisecond, 61500 * time.Millisecond, queue.MaxVisibilityTimeout} {
		if err := q.ChangeVisibility(context.Background(), "rh", d); err != nil {
			t.Fatalf("ChangeVisibility(%v): %v", d, err)
		}
	}
	want := []float64{0, 1, 62, 43200}
	calls := f.calls()
	for i, c := range calls {
		if c.Action != "ChangeMessageVisibility" || c.Body["VisibilityTimeout"] != want[i] || c.Body["ReceiptHandle"] != "rh" {
			t.Errorf("call %d = %+v, want visibility %v", i, c, want[i])
		}
	}
}

func TestSendRequestShape(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("SendMessage", fakeAnswer{Body: `{"MessageId":"m-9","MD5OfMessageBody":"` + md5Hex(`{"k":"值"}`) + `","SequenceNumber":"1"}`})
	res, err := f.queue().Send(context.Background(), queue.SendParams{Group: "acct-a#0", DedupID: "job-1/0/7", Body: []byte(`{"k":"值"}`)})
	if err != nil {
		t.Fatalf("Send: %v", err)
	}
	if res.MessageID != "m-9" || res.Duplicate {
		t.Errorf("result = %+v, want MessageID m-9, not duplicate", res)
	}
	b := f.calls()[0].Body
	if b["MessageGroupId"] != "acct-a#0" || b["MessageDeduplicationId"] != "job-1/0/7" || b["MessageBody"] != `{"k":"值"}` {
		t.Errorf("SendMessage body = %v", b)
	}
	if _, ok := b["DelaySeconds"]; ok {
		t.Errorf("SendMessage carried DelaySeconds, which FIFO queues refuse per message")
	}
}

func TestInvalidArgumentsNeverReachSQS(t *testing.T) {
	t.Parallel()
	long := strings.Repeat("x", queue.MaxIDLength+1)
	send := func(p queue.SendParams) func(*Queue) error {
		return func(q *Queue) error { _, err := q.Send(context.Background(), p); return err }
	}
	recv := func(p queue.ReceiveParams) func(*Queue) error {
		return func(q *Queue) error { _, err := q.Receive(context.Background(), p); return err }
	}
	body := []byte("b")
	cases := map[string]func(*Queue) error{
		"empty group":           send(queue.SendParams{DedupID: "d", Body: body}),
		"empty dedup id":        send(queue.SendParams{Group: "g", Body: body}),
		"long group":            send(queue.SendParams{Group: long, DedupID: "d", Body: body}),
		"long dedup id":         send(queue.SendParams{Group: "g", DedupID: long, Body: body}),
		"space in group":        send(queue.SendParams{Group: "a b", DedupID: "d", Body: body}),
		"non-ascii dedup id":    send(queue.SendParams{Group: "g", DedupID: "é", Body: body}),
		"empty body":            send(queue.SendParams{Group: "g", DedupID: "d"}),
		"huge body":             send(queue.SendParams{Group: "g", DedupID: "d", Body: make([]byte, queue.MaxBodyBytes+1)}),
		"body not utf-8":        send(queue.SendParams{Group: "g", DedupID: "d", Body: []byte{0xff, 0xfe}}),
		"body with NUL":         send(queue.SendParams{Group: "g", DedupID: "d", Body: []byte("a\x00b")}),
		"max 0":                 recv(queue.ReceiveParams{Max: 0, VisibilityTimeout: time.Second}),
		"max 11":                recv(queue.ReceiveParams{Max: queue.MaxReceive + 1, VisibilityTimeout: time.Second}),
		"negative visibility":   recv(queue.ReceiveParams{Max: 1, VisibilityTimeout: -time.Second}),
		"visibility over 12h":   recv(queue.ReceiveParams{Max: 1, VisibilityTimeout: queue.MaxVisibilityTimeout + time.Second}),
		"negative wait":         recv(queue.ReceiveParams{Max: 1, Wait: -time.Second}),
		"wait over 20s":         recv(queue.ReceiveParams{Max: 1, Wait: queue.MaxWait + time.Millisecond}),
		"change visibility -1s": func(q *Queue) error { return q.ChangeVisibility(context.Background(), "rh", -time.Second) },
		"change visibility 13h": func(q *Queue) error { return q.ChangeVisibility(context.Background(), "rh", 13*time.Hour) },
	}
	for name, call := range cases {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			f := newFakeSQS(t)
			if err := call(f.queue()); !errors.Is(err, queue.ErrInvalidArgument) {
				t.Errorf("err = %v, want ErrInvalidArgument", err)
			}
			if n := len(f.calls()); n != 0 {
				t.Errorf("%d requests reached SQS", n)
			}
		})
	}
}

func TestSendAcceptsSQSCharacterSet(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("SendMessage", fakeAnswer{Body: `{"MessageId":"m"}`}) // no MD5: the SDK checks only what is given
	q := f.queue()
	ok := []queue.SendParams{
		{Group: "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~", DedupID: strings.Repeat("z", queue.MaxIDLength), Body: []byte("tab\tnl\ncr\r")},
		{Group: "g", DedupID: "d", Body: []byte("emoji 😀 and \uE000 \uFFFD")},
		{Group: "g", DedupID: "d", Body: []byte(strings.Repeat("a", queue.MaxBodyBytes))},
	}
	for i, p := range ok {
		if _, err := q.Send(context.Background(), p); err != nil {
			t.Errorf("Send #%d: %v", i, err)
		}
	}
}

// sqsError builds a JSON-protocol error answer the way real SQS does: the
// JSON __type and the query-compatible code in X-Amzn-Query-Error.
func sqsError(jsonType, queryCode, message string) fakeAnswer {
	body, _ := json.Marshal(map[string]string{"__type": "com.amazonaws.sqs#" + jsonType, "message": message})
	return fakeAnswer{Status: 400, Body: string(body), QueryError: queryCode + ";Sender"}
}

func TestErrorMapping(t *testing.T) {
	t.Parallel()
	cases := []struct {
		name   string
		answer fakeAnswer
		want   error // nil: neither sentinel
	}{
		{"expired handle (FIFO delete)", sqsError("InvalidParameterValueException", "InvalidParameterValue",
			"Value AQEB for parameter ReceiptHandle is invalid. Reason: The receipt handle has expired."), queue.ErrNotFound},
		{"deleted message (change visibility)", sqsError("InvalidParameterValueException", "InvalidParameterValue",
			"Value AQEB for parameter ReceiptHandle is invalid. Reason: Message does not exist or is not available for visibility timeout change."), queue.ErrNotFound},
		{"malformed handle", sqsError("ReceiptHandleIsInvalid", "ReceiptHandleIsInvalid", "The input receipt handle \"x\" is not a valid receipt handle."), queue.ErrNotFound},
		{"not in flight", sqsError("MessageNotInflight", "AWS.SimpleQueueService.MessageNotInflight", "Message does not exist or is not available for visibility timeout change."), queue.ErrNotFound},
		{"other invalid parameter", sqsError("InvalidParameterValueException", "InvalidParameterValue",
			"Value 50000 for parameter VisibilityTimeout is invalid. Reason: Total VisibilityTimeout for the message is beyond the limit [43200 seconds]"), queue.ErrInvalidArgument},
		{"missing parameter", sqsError("MissingRequiredParameterException", "MissingParameter", "The request must contain the parameter ReceiptHandle."), queue.ErrInvalidArgument},
		{"queue gone", sqsError("QueueDoesNotExist", "AWS.SimpleQueueService.NonExistentQueue", "The specified queue does not exist."), nil},
		{"throttled", sqsError("RequestThrottled", "RequestThrottled", "slow down"), nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			f := newFakeSQS(t)
			f.answer("DeleteMessage", c.answer)
			f.answer("ChangeMessageVisibility", c.answer)
			q := f.queue()
			for op, err := range map[string]error{
				"Delete":           q.Delete(context.Background(), "rh"),
				"ChangeVisibility": q.ChangeVisibility(context.Background(), "rh", time.Second),
			} {
				if err == nil {
					t.Fatalf("%s: no error", op)
				}
				notFound, invalid := errors.Is(err, queue.ErrNotFound), errors.Is(err, queue.ErrInvalidArgument)
				switch c.want {
				case nil:
					if notFound || invalid {
						t.Errorf("%s: %v mapped to a sentinel", op, err)
					}
				case queue.ErrNotFound:
					if !notFound || invalid {
						t.Errorf("%s: %v, want only ErrNotFound", op, err)
					}
				case queue.ErrInvalidArgument:
					if !invalid || notFound {
						t.Errorf("%s: %v, want only ErrInvalidArgument", op, err)
					}
				}
			}
		})
	}
}

func TestSendMapsInvalidContents(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("SendMessage", sqsError("InvalidMessageContents", "InvalidMessageContents", "Invalid characters found."))
	_, err := f.queue().Send(context.Background(), queue.SendParams{Group: "g", DedupID: "d", Body: []byte("b")})
	if !errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("err = %v, want ErrInvalidArgument", err)
	}
}

func TestEmptyReceiptHandleIsInvalid(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	q := f.queue()
	if err := q.Delete(context.Background(), ""); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("Delete(\"\") = %v, want ErrInvalidArgument", err)
	}
	if err := q.ChangeVisibility(context.Background(), "", 0); !errors.Is(err, queue.ErrInvalidArgument) {
		t.Errorf("ChangeVisibility(\"\") = %v, want ErrInvalidArgument", err)
	}
	if n := len(f.calls()); n != 0 {
		t.Errorf("%d requests reached SQS", n)
	}
}

func TestCreateQueuesRequestShape(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	f.answer("CreateQueue",
		fakeAnswer{Body: `{"QueueUrl":"http://sqs/000000000000/jobs-dlq.fifo"}`},
		fakeAnswer{Body: `{"QueueUrl":"http://sqs/000000000000/jobs.fifo"}`})
	f.answer("GetQueueAttributes", fakeAnswer{Body: `{"Attributes":{"QueueArn":"arn:aws:sqs:us-east-1:000000000000:jobs-dlq.fifo"}}`})
	url, dlq, err := CreateQueues(context.Background(), f.client(), "jobs", 5)
	if err != nil {
		t.Fatalf("CreateQueues: %v", err)
	}
	if url != "http://sqs/000000000000/jobs.fifo" || dlq != "http://sqs/000000000000/jobs-dlq.fifo" {
		t.Errorf("urls = %s, %s", url, dlq)
	}
	calls := f.calls()
	if len(calls) != 3 {
		t.Fatalf("calls = %+v, want CreateQueue, GetQueueAttributes, CreateQueue", calls)
	}
	attrsOf := func(c fakeRequest) map[string]any { m, _ := c.Body["Attributes"].(map[string]any); return m }
	if calls[0].Body["QueueName"] != "jobs-dlq.fifo" {
		t.Errorf("first queue = %v, want jobs-dlq.fifo", calls[0].Body["QueueName"])
	}
	if calls[2].Body["QueueName"] != "jobs.fifo" {
		t.Errorf("second queue = %v, want jobs.fifo", calls[2].Body["QueueName"])
	}
	for _, c := range []fakeRequest{calls[0], calls[2]} {
		a := attrsOf(c)
		if a["FifoQueue"] != "true" || a["ContentBasedDeduplication"] != "false" {
			t.Errorf("%v attributes = %v, want FIFO without content-based dedup", c.Body["QueueName"], a)
		}
	}
	var policy struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     string `json:"maxReceiveCount"`
	}
	raw, _ := attrsOf(calls[2])["RedrivePolicy"].(string)
	if err := json.Unmarshal([]byte(raw), &policy); err != nil {
		t.Fatalf("RedrivePolicy %q: %v", raw, err)
	}
	if policy.DeadLetterTargetArn != "arn:aws:sqs:us-east-1:000000000000:jobs-dlq.fifo" || policy.MaxReceiveCount != "5" {
		t.Errorf("RedrivePolicy = %+v", policy)
	}
	if got := attrsOf(calls[0])["MessageRetentionPeriod"]; got != "1209600" {
		t.Errorf("DLQ MessageRetentionPeriod = %v, want 1209600 (14 days)", got)
	}
	if _, ok := attrsOf(calls[2])["MessageRetentionPeriod"]; ok {
		t.Errorf("main queue retention set; it should keep the SQS default")
	}
}

func TestCreateQueuesValidates(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	for _, c := range []struct {
		name string
		max  int
	}{
		{"", 5}, {"has space", 5}, {"dot.fifo", 5}, {strings.Repeat("n", 72), 5}, {"ok", 0}, {"ok", 1001},
	} {
		if _, _, err := CreateQueues(context.Background(), f.client(), c.name, c.max); !errors.Is(err, queue.ErrInvalidArgument) {
			t.Errorf("CreateQueues(%q, %d) = %v, want ErrInvalidArgument", c.name, c.max, err)
		}
	}
	if _, _, err := CreateQueues(context.Background(), f.client(), strings.Repeat("n", 71), 1000); err == nil {
		// The fake answers {} to CreateQueue: no URL, no ARN.
		t.Errorf("CreateQueues accepted an answer without a queue ARN")
	}
	for _, c := range f.calls() {
		if name, _ := c.Body["QueueName"].(string); name != "" && name != strings.Repeat("n", 71)+"-dlq.fifo" {
			t.Errorf("invalid call reached SQS: %+v", c)
		}
	}
}

func TestReceiveCancelKeepsContextError(t *testing.T) {
	t.Parallel()
	block := make(chan struct{})
	f := newFakeSQS(t)
	f.holdRequests(block)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := f.queue().Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: time.Second, Wait: queue.MaxWait})
		done <- err
	}()
	<-f.arrived // the long poll is at the server
	cancel()
	err := <-done
	close(block)
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v, want context.Canceled in the chain", err)
	}
	if errors.Is(err, queue.ErrNotFound) || errors.Is(err, queue.ErrInvalidArgument) {
		t.Fatalf("cancellation mapped to a port sentinel: %v", err)
	}
}

// TestSendBatchRetriesFailedEntries: twelve messages go out as two
// SendMessageBatch requests (10 and 2), every entry with its own group
// and deduplication id; the entry SQS fails on its side is sent again on
// its own, the one failed by the sender's fault is not and comes back
// as ErrInvalidArgument, and every other message is sent.
func TestSendBatchRetriesFailedEntries(t *testing.T) {
	t.Parallel()
	f := newFakeSQS(t)
	var msgs []queue.SendParams
	for i := range 12 {
		msgs = append(msgs, queue.SendParams{Group: fmt.Sprintf("job-%d", i), DedupID: fmt.Sprintf("job-%d-1", i), Body: []byte(fmt.Sprintf(`{"shard":%d}`, i))})
	}
	ok := func(ids ...int) string {
		var parts []string
		for _, i := range ids {
			parts = append(parts, fmt.Sprintf(`{"Id":"%d","MessageId":"m-%d","MD5OfMessageBody":"%s","SequenceNumber":"1"}`, i, i, md5Hex(string(msgs[i].Body))))
		}
		return strings.Join(parts, ",")
	}
	f.answer("SendMessageBatch",
		fakeAnswer{Body: `{"Successful":[` + ok(0, 1, 2, 4, 5, 6, 7, 8) + `],"Failed":[` +
			`{"Id":"3","SenderFault":false,"Code":"InternalError","Message":"try again"},` +
			`{"Id":"9","SenderFault":true,"Code":"InvalidParameterValue","Message":"no"}]}`},
		fakeAnswer{Body: `{"Successful":[` + strings.ReplaceAll(strings.ReplaceAll(ok(10, 11), `"Id":"10"`, `"Id":"0"`), `"Id":"11"`, `"Id":"1"`) + `],"Failed":[]}`})
	f.answer("SendMessage", fakeAnswer{Body: `{"MessageId":"m-retry","MD5OfMessageBody":"` + md5Hex(string(msgs[3].Body)) + `","SequenceNumber":"2"}`})

	results, err := f.queue().SendBatch(context.Background(), msgs)
	if err != nil || len(results) != len(msgs) {
		t.Fatalf("SendBatch: %d results, %v", len(results), err)
	}
	for i, r := range results {
		switch {
		case i == 3:
			if r.Err != nil || r.MessageID != "m-retry" {
				t.Errorf("message 3 (failed on SQS's side): %+v, want sent again alone", r)
			}
		case i == 9:
			if !errors.Is(r.Err, queue.ErrInvalidArgument) {
				t.Errorf("message 9 (sender's fault): %+v, want ErrInvalidArgument", r)
			}
		case r.Err != nil || r.MessageID != fmt.Sprintf("m-%d", i):
			t.Errorf("message %d: %+v, want sent as m-%d", i, r, i)
		}
	}
	var sizes []int
	var singles []string
	for _, c := range f.calls() {
		switch c.Action {
		case "SendMessageBatch":
			entries, _ := c.Body["Entries"].([]any)
			sizes = append(sizes, len(entries))
			for _, e := range entries {
				e := e.(map[string]any)
				if e["MessageGroupId"] == nil || e["MessageDeduplicationId"] == nil || e["MessageBody"] == nil {
					t.Errorf("entry %v without its group, dedup id or body", e)
				}
			}
		case "SendMessage":
			singles = append(singles, fmt.Sprint(c.Body["MessageDeduplicationId"]))
		}
	}
	if fmt.Sprint(sizes) != "[10 2]" || fmt.Sprint(singles) != "[job-3-1]" {
		t.Errorf("requests: batches of %v, single sends %v; want [10 2] and [job-3-1]", sizes, singles)
	}
}
