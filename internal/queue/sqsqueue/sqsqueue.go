// Package sqsqueue is the production adapter of the queue port: an Amazon
// SQS FIFO queue (with a FIFO dead-letter queue) reached through
// aws-sdk-go-v2. It keeps the port's FIFO rules by relying on SQS itself —
// message groups, visibility timeouts, deduplication ids and the redrive
// policy — and translates SQS errors into the port's sentinel errors.
//
// SQS counts visibility timeouts and long-poll waits in whole seconds, so
// durations are rounded up to the next second and checked against the SQS
// ranges (visibility 0–12 h, wait 0–20 s) before any request is made.
package sqsqueue

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"

	"github.com/qunfa/qunfa/internal/queue"
)

// Limits of CreateQueues (the message limits are the port's, in package queue).
const (
	// MaxReceiveCountLimit is the largest maxReceiveCount a redrive policy takes.
	MaxReceiveCountLimit = 1000
	// maxQueueNameLength is the longest SQS queue name, ".fifo" included.
	maxQueueNameLength = 80
	// dlqRetentionSeconds is the dead-letter queue's retention: 14 days,
	// the SQS maximum.
	dlqRetentionSeconds = 14 * 24 * 60 * 60
)

// DLQSuffix is appended to a queue's name (before ".fifo") to name its
// dead-letter queue.
const DLQSuffix = "-dlq"

// Queue is a queue.Queue over one SQS FIFO queue. Safe for concurrent use
// (the SQS client is).
type Queue struct {
	client *sqs.Client
	url    string
}

var _ queue.Queue = (*Queue)(nil)

// New returns the adapter for the FIFO queue at queueURL.
func New(client *sqs.Client, queueURL string) *Queue {
	return &Queue{client: client, url: queueURL}
}

// URL returns the queue URL the adapter sends to.
func (q *Queue) URL() string { return q.url }

// CreateQueues creates the FIFO queue name.fifo and its FIFO dead-letter
// queue name-dlq.fifo, with a redrive policy that moves a message already
// received maxReceiveCount times to the dead-letter queue instead of
// delivering it again. Content-based deduplication is off: every Send
// carries its own deduplication id. The dead-letter queue keeps messages
// for the longest period SQS allows (14 days), so operators have time to
// look. Creating queues that already exist with the same attributes
// returns their URLs.
func CreateQueues(ctx context.Context, client *sqs.Client, name string, maxReceiveCount int) (queueURL, dlqURL string, err error) {
	if err := validateQueueName(name); err != nil {
		return "", "", err
	}
	if maxReceiveCount < 1 || maxReceiveCount > MaxReceiveCountLimit {
		return "", "", fmt.Errorf("%w: maxReceiveCount %d not in 1..%d", queue.ErrInvalidArgument, maxReceiveCount, MaxReceiveCountLimit)
	}
	fifo := map[string]string{
		string(types.QueueAttributeNameFifoQueue):                 "true",
		string(types.QueueAttributeNameContentBasedDeduplication): "false",
	}
	dlqAttrs := map[string]string{string(types.QueueAttributeNameMessageRetentionPeriod): strconv.Itoa(dlqRetentionSeconds)}
	for k, v := range fifo {
		dlqAttrs[k] = v
	}
	dlq, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(name + DLQSuffix + ".fifo"),
		Attributes: dlqAttrs,
	})
	if err != nil {
		return "", "", fmt.Errorf("create dead-letter queue %s: %w", name+DLQSuffix, interpretError(err))
	}
	if aws.ToString(dlq.QueueUrl) == "" {
		return "", "", fmt.Errorf("create dead-letter queue %s: no QueueUrl in the answer", name+DLQSuffix)
	}
	attrs, err := client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl:       dlq.QueueUrl,
		AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameQueueArn},
	})
	if err != nil {
		return "", "", fmt.Errorf("get dead-letter queue arn: %w", interpretError(err))
	}
	dlqARN := attrs.Attributes[string(types.QueueAttributeNameQueueArn)]
	if dlqARN == "" {
		return "", "", errors.New("get dead-letter queue arn: no QueueArn attribute in the answer")
	}
	policy, err := json.Marshal(struct {
		DeadLetterTargetArn string `json:"deadLetterTargetArn"`
		MaxReceiveCount     string `json:"maxReceiveCount"`
	}{dlqARN, strconv.Itoa(maxReceiveCount)})
	if err != nil {
		return "", "", fmt.Errorf("encode redrive policy: %w", err)
	}
	queueAttrs := map[string]string{string(types.QueueAttributeNameRedrivePolicy): string(policy)}
	for k, v := range fifo {
		queueAttrs[k] = v
	}
	out, err := client.CreateQueue(ctx, &sqs.CreateQueueInput{
		QueueName:  aws.String(name + ".fifo"),
		Attributes: queueAttrs,
	})
	if err != nil {
		return "", "", fmt.Errorf("create queue %s: %w", name, interpretError(err))
	}
	return aws.ToString(out.QueueUrl), aws.ToString(dlq.QueueUrl), nil
}

// validateQueueName checks name against the SQS rules, leaving room for the
// "-dlq" and ".fifo" suffixes.
func validateQueueName(name string) error {
	if name == "" || len(name)+len(DLQSuffix)+len(".fifo") > maxQueueNameLength {
		return fmt.Errorf("%w: queue name %q must have 1..%d characters", queue.ErrInvalidArgument, name, maxQueueNameLength-len(DLQSuffix)-len(".fifo"))
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return fmt.Errorf("%w: queue name %q may hold only letters, digits, '-' and '_'", queue.ErrInvalidArgument, name)
		}
	}
	return nil
}

// Send appends p.Body to group p.Group with deduplication id p.DedupID.
// SQS accepts a duplicate without saying so, so SendResult.Duplicate is
// always false. The body must be non-empty UTF-8 text in the SQS
// character set (JSON is); anything else is queue.ErrInvalidArgument.
func (q *Queue) Send(ctx context.Context, p queue.SendParams) (queue.SendResult, error) {
	if err := validateID("group", p.Group); err != nil {
		return queue.SendResult{}, err
	}
	if err := validateID("dedup id", p.DedupID); err != nil {
		return queue.SendResult{}, err
	}
	if err := validateBody(p.Body); err != nil {
		return queue.SendResult{}, err
	}
	out, err := q.client.SendMessage(ctx, &sqs.SendMessageInput{
		QueueUrl:               aws.String(q.url),
		MessageBody:            aws.String(string(p.Body)),
		MessageGroupId:         aws.String(p.Group),
		MessageDeduplicationId: aws.String(p.DedupID),
	})
	if err != nil {
		return queue.SendResult{}, fmt.Errorf("send to group %s: %w", p.Group, interpretError(err))
	}
	return queue.SendResult{MessageID: aws.ToString(out.MessageId)}, nil
}

var _ queue.BatchSender = (*Queue)(nil)

// SendBatch sends the messages in SendMessageBatch requests of up to
// queue.MaxSendBatch entries and queue.MaxBodyBytes of bodies, each entry
// with its own group and deduplication id (a FIFO queue keeps the order of
// the entries of one group). A whole request that fails after the SDK's
// retries fails its entries; an entry SQS reports Failed without its
// sender's fault (throttled, an internal error) is retried once on its own
// with SendMessage, and one failed by the sender's fault is not retried.
// Every message is validated before any request.
func (q *Queue) SendBatch(ctx context.Context, p []queue.SendParams) ([]queue.SendBatchResult, error) {
	for i, m := range p {
		for _, err := range []error{validateID("group", m.Group), validateID("dedup id", m.DedupID), validateBody(m.Body)} {
			if err != nil {
				return nil, fmt.Errorf("message %d: %w", i, err)
			}
		}
	}
	results := make([]queue.SendBatchResult, len(p))
	for start := 0; start < len(p); {
		end, size := start, 0
		for end < len(p) && end-start < queue.MaxSendBatch && size+len(p[end].Body) <= queue.MaxBodyBytes {
			size += len(p[end].Body)
			end++
		}
		if err := q.sendBatch(ctx, p[start:end], results[start:end]); err != nil {
			return nil, err
		}
		start = end
	}
	return results, nil
}

// sendBatch sends one SendMessageBatch request of p and fills results.
func (q *Queue) sendBatch(ctx context.Context, p []queue.SendParams, results []queue.SendBatchResult) error {
	entries := make([]types.SendMessageBatchRequestEntry, len(p))
	for i, m := range p {
		entries[i] = types.SendMessageBatchRequestEntry{
			Id: aws.String(strconv.Itoa(i)), MessageBody: aws.String(string(m.Body)),
			MessageGroupId: aws.String(m.Group), MessageDeduplicationId: aws.String(m.DedupID),
		}
	}
	out, err := q.client.SendMessageBatch(ctx, &sqs.SendMessageBatchInput{QueueUrl: aws.String(q.url), Entries: entries})
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		err = interpretError(err)
		for i, m := range p {
			results[i].Err = fmt.Errorf("send to group %s: %w", m.Group, err)
		}
		return nil
	}
	answered := make([]bool, len(p))
	for _, ok := range out.Successful {
		i, err := strconv.Atoi(aws.ToString(ok.Id))
		if err != nil || i < 0 || i >= len(p) {
			continue
		}
		answered[i] = true
		results[i].MessageID = aws.ToString(ok.MessageId)
	}
	for _, f := range out.Failed {
		i, err := strconv.Atoi(aws.ToString(f.Id))
		if err != nil || i < 0 || i >= len(p) {
			continue
		}
		answered[i] = true
		if f.SenderFault {
			results[i].Err = fmt.Errorf("send to group %s: %w: %s: %s", p[i].Group, queue.ErrInvalidArgument,
				aws.ToString(f.Code), aws.ToString(f.Message))
			continue
		}
		results[i].SendResult, results[i].Err = q.Send(ctx, p[i])
	}
	for i, ok := range answered {
		if !ok { // neither successful nor failed: SQS did not say, so send it alone
			results[i].SendResult, results[i].Err = q.Send(ctx, p[i])
		}
	}
	return nil
}

// validateID checks a MessageGroupId or MessageDeduplicationId: 1..128
// characters, letters, digits and ASCII punctuation.
func validateID(what, id string) error {
	if id == "" || len(id) > queue.MaxIDLength {
		return fmt.Errorf("%w: %s must have 1..%d characters, got %d", queue.ErrInvalidArgument, what, queue.MaxIDLength, len(id))
	}
	for i := 0; i < len(id); i++ {
		if c := id[i]; c <= ' ' || c > '~' {
			return fmt.Errorf("%w: %s %q holds a character SQS refuses (only letters, digits and punctuation)", queue.ErrInvalidArgument, what, id)
		}
	}
	return nil
}

// validateBody checks a message body against the SQS character set:
// #x9 | #xA | #xD | #x20 to #xD7FF | #xE000 to #xFFFD | #x10000 to #x10FFFF.
func validateBody(b []byte) error {
	if len(b) == 0 || len(b) > queue.MaxBodyBytes {
		return fmt.Errorf("%w: message body has %d bytes, not 1..%d", queue.ErrInvalidArgument, len(b), queue.MaxBodyBytes)
	}
	if !utf8.Valid(b) {
		return fmt.Errorf("%w: message body is not UTF-8 text", queue.ErrInvalidArgument)
	}
	for i, r := range string(b) {
		ok := r == 0x9 || r == 0xA || r == 0xD ||
			r >= 0x20 && r <= 0xD7FF ||
			r >= 0xE000 && r <= 0xFFFD ||
			r >= 0x10000 && r <= 0x10FFFF
		if !ok {
			return fmt.Errorf("%w: message body holds character %U at byte %d, which SQS refuses", queue.ErrInvalidArgument, r, i)
		}
	}
	return nil
}

// receiveAttributes are the system attributes every Receive asks for.
var receiveAttributes = []types.MessageSystemAttributeName{
	types.MessageSystemAttributeNameMessageGroupId,
	types.MessageSystemAttributeNameMessageDeduplicationId,
	types.MessageSystemAttributeNameApproximateReceiveCount,
	types.MessageSystemAttributeNameSentTimestamp,
}

// Receive returns up to p.Max messages (1..queue.MaxReceive), each
// invisible for p.VisibilityTimeout rounded up to whole seconds, waiting up
// to p.Wait (rounded up, at most 20 s) for one to arrive. A zero
// VisibilityTimeout is honoured by making the received messages visible
// again at once (SQS would otherwise apply the queue's default). A zero
// Wait means the queue's own ReceiveMessageWaitTimeSeconds, which is 0 for
// queues made by CreateQueues.
func (q *Queue) Receive(ctx context.Context, p queue.ReceiveParams) ([]queue.Message, error) {
	if p.Max < 1 || p.Max > queue.MaxReceive {
		return nil, fmt.Errorf("%w: max %d not in 1..%d", queue.ErrInvalidArgument, p.Max, queue.MaxReceive)
	}
	visibility, err := seconds("visibility timeout", p.VisibilityTimeout, queue.MaxVisibilityTimeout)
	if err != nil {
		return nil, err
	}
	wait, err := seconds("wait", p.Wait, queue.MaxWait)
	if err != nil {
		return nil, err
	}
	attempt, err := attemptID()
	if err != nil {
		return nil, err
	}
	out, err := q.client.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl:                    aws.String(q.url),
		MaxNumberOfMessages:         int32(p.Max),
		VisibilityTimeout:           visibility,
		WaitTimeSeconds:             wait,
		MessageSystemAttributeNames: receiveAttributes,
		// The same attempt id on an SDK retry returns the same messages
		// instead of leaving the first answer's messages invisible.
		ReceiveRequestAttemptId: aws.String(attempt),
	})
	if err != nil {
		return nil, fmt.Errorf("receive: %w", interpretError(err))
	}
	msgs := make([]queue.Message, 0, len(out.Messages))
	for _, m := range out.Messages {
		msg, err := parseMessage(m)
		if err != nil {
			return nil, fmt.Errorf("receive: %w", err)
		}
		msgs = append(msgs, msg)
	}
	if visibility == 0 && len(msgs) > 0 {
		if err := q.releaseAll(ctx, msgs); err != nil {
			return nil, err
		}
	}
	return msgs, nil
}

// releaseAll makes just-received messages visible again, for a Receive
// asked with a zero visibility timeout.
func (q *Queue) releaseAll(ctx context.Context, msgs []queue.Message) error {
	entries := make([]types.ChangeMessageVisibilityBatchRequestEntry, len(msgs))
	for i, m := range msgs {
		entries[i] = types.ChangeMessageVisibilityBatchRequestEntry{
			Id:                aws.String(strconv.Itoa(i)),
			ReceiptHandle:     aws.String(m.ReceiptHandle),
			VisibilityTimeout: 0,
		}
	}
	out, err := q.client.ChangeMessageVisibilityBatch(ctx, &sqs.ChangeMessageVisibilityBatchInput{
		QueueUrl: aws.String(q.url),
		Entries:  entries,
	})
	if err != nil {
		return fmt.Errorf("receive: release with zero visibility: %w", interpretError(err))
	}
	if len(out.Failed) > 0 {
		f := out.Failed[0]
		return fmt.Errorf("receive: release with zero visibility: %d of %d failed, first: %s: %s",
			len(out.Failed), len(msgs), aws.ToString(f.Code), aws.ToString(f.Message))
	}
	return nil
}

// attemptID returns a fresh ReceiveRequestAttemptId.
func attemptID() (string, error) {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("receive attempt id: %w", err)
	}
	return hex.EncodeToString(b[:]), nil
}

// seconds converts d to whole seconds, rounding up, and checks 0 <= d <= max.
func seconds(what string, d, max time.Duration) (int32, error) {
	if d < 0 || d > max {
		return 0, fmt.Errorf("%w: %s %v not in 0..%v", queue.ErrInvalidArgument, what, d, max)
	}
	s := (d + time.Second - 1) / time.Second
	return int32(s), nil
}

// parseMessage turns an SQS message into a queue.Message. A FIFO message
// always carries the system attributes Receive asks for; one missing is an
// error, not a zero value.
func parseMessage(m types.Message) (queue.Message, error) {
	id := aws.ToString(m.MessageId)
	attr := func(name types.MessageSystemAttributeName) (string, error) {
		v, ok := m.Attributes[string(name)]
		if !ok {
			return "", fmt.Errorf("message %s: no %s attribute (is the queue FIFO?)", id, name)
		}
		return v, nil
	}
	group, err := attr(types.MessageSystemAttributeNameMessageGroupId)
	if err != nil {
		return queue.Message{}, err
	}
	dedup, err := attr(types.MessageSystemAttributeNameMessageDeduplicationId)
	if err != nil {
		return queue.Message{}, err
	}
	countText, err := attr(types.MessageSystemAttributeNameApproximateReceiveCount)
	if err != nil {
		return queue.Message{}, err
	}
	count, err := strconv.Atoi(countText)
	if err != nil || count < 1 {
		return queue.Message{}, fmt.Errorf("message %s: bad ApproximateReceiveCount %q", id, countText)
	}
	sentText, err := attr(types.MessageSystemAttributeNameSentTimestamp)
	if err != nil {
		return queue.Message{}, err
	}
	sentMillis, err := strconv.ParseInt(sentText, 10, 64)
	if err != nil {
		return queue.Message{}, fmt.Errorf("message %s: bad SentTimestamp %q", id, sentText)
	}
	if id == "" || m.ReceiptHandle == nil || m.Body == nil {
		return queue.Message{}, fmt.Errorf("message %q: missing id, receipt handle or body", id)
	}
	return queue.Message{
		ID:            id,
		Group:         group,
		DedupID:       dedup,
		Body:          []byte(*m.Body),
		ReceiptHandle: *m.ReceiptHandle,
		ReceiveCount:  count,
		SentAt:        time.UnixMilli(sentMillis),
	}, nil
}

// Delete removes a received message. A receipt handle SQS never issued,
// or one whose visibility timeout has expired (FIFO queues refuse those),
// is queue.ErrNotFound. A repeated delete with the handle of a message
// already deleted is not reliably reported: SQS may accept it.
func (q *Queue) Delete(ctx context.Context, receiptHandle string) error {
	if receiptHandle == "" {
		return fmt.Errorf("delete: %w: empty receipt handle", queue.ErrInvalidArgument)
	}
	_, err := q.client.DeleteMessage(ctx, &sqs.DeleteMessageInput{
		QueueUrl:      aws.String(q.url),
		ReceiptHandle: aws.String(receiptHandle),
	})
	if err != nil {
		return fmt.Errorf("delete: %w", interpretError(err))
	}
	return nil
}

// ChangeVisibility makes a received message visible again after d, rounded
// up to whole seconds (0 = now). SQS counts d from now, and refuses a total
// beyond 12 h since the receive (queue.ErrInvalidArgument).
func (q *Queue) ChangeVisibility(ctx context.Context, receiptHandle string, d time.Duration) error {
	secs, err := seconds("visibility timeout", d, queue.MaxVisibilityTimeout)
	if err != nil {
		return err
	}
	if receiptHandle == "" {
		return fmt.Errorf("change visibility: %w: empty receipt handle", queue.ErrInvalidArgument)
	}
	_, err = q.client.ChangeMessageVisibility(ctx, &sqs.ChangeMessageVisibilityInput{
		QueueUrl:          aws.String(q.url),
		ReceiptHandle:     aws.String(receiptHandle),
		VisibilityTimeout: secs,
	})
	if err != nil {
		return fmt.Errorf("change visibility: %w", interpretError(err))
	}
	return nil
}

// interpretError maps an SQS error onto the port's sentinel errors, keeping
// the original in the chain:
//   - ReceiptHandleIsInvalid, MessageNotInflight, and an InvalidParameterValue
//     about the ReceiptHandle (FIFO queues answer so for an expired handle)
//     → queue.ErrNotFound;
//   - other InvalidParameterValue, MissingParameter, InvalidMessageContents,
//     InvalidIdFormat, InvalidAttributeValue → queue.ErrInvalidArgument.
//
// Anything else (throttling, network, missing queue) is returned as is.
func interpretError(err error) error {
	var (
		badHandle   *types.ReceiptHandleIsInvalid
		notInflight *types.MessageNotInflight
		badID       *types.InvalidIdFormat
		badContents *types.InvalidMessageContents
		badAttr     *types.InvalidAttributeValue
		badName     *types.InvalidAttributeName
	)
	switch {
	case errors.As(err, &badHandle), errors.As(err, &notInflight):
		return fmt.Errorf("%w: %w", queue.ErrNotFound, err)
	case errors.As(err, &badID), errors.As(err, &badContents), errors.As(err, &badAttr), errors.As(err, &badName):
		return fmt.Errorf("%w: %w", queue.ErrInvalidArgument, err)
	}
	var api smithy.APIError
	if !errors.As(err, &api) {
		return err
	}
	code := api.ErrorCode()
	if i := strings.LastIndexAny(code, ".#"); i >= 0 {
		code = code[i+1:] // AWS.SimpleQueueService.X and com.amazonaws.sqs#X
	}
	switch code {
	case "ReceiptHandleIsInvalid", "MessageNotInflight":
		return fmt.Errorf("%w: %w", queue.ErrNotFound, err)
	case "InvalidParameterValue", "InvalidParameterValueException":
		if strings.Contains(strings.ToLower(api.ErrorMessage()), "receipthandle") {
			return fmt.Errorf("%w: %w", queue.ErrNotFound, err)
		}
		return fmt.Errorf("%w: %w", queue.ErrInvalidArgument, err)
	case "MissingParameter", "InvalidIdFormat", "InvalidMessageContents", "InvalidAttributeValue", "InvalidAttributeName":
		return fmt.Errorf("%w: %w", queue.ErrInvalidArgument, err)
	}
	return err
}

// Depth returns the queue's approximate number of visible messages and of
// messages in flight (received, not deleted, not yet visible again), as
// SQS reports them (ApproximateNumberOfMessages, …NotVisible).
func (q *Queue) Depth(ctx context.Context) (visible, inFlight int, err error) {
	out, err := q.client.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{
		QueueUrl: aws.String(q.url),
		AttributeNames: []types.QueueAttributeName{
			types.QueueAttributeNameApproximateNumberOfMessages, types.QueueAttributeNameApproximateNumberOfMessagesNotVisible,
		},
	})
	if err != nil {
		return 0, 0, fmt.Errorf("queue depth: %w", interpretError(err))
	}
	visible, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessages)])
	inFlight, _ = strconv.Atoi(out.Attributes[string(types.QueueAttributeNameApproximateNumberOfMessagesNotVisible)])
	return visible, inFlight, nil
}
