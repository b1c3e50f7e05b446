package awsrun_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/aws/aws-lambda-go/events"

	"github.com/qunfa/qunfa/internal/queue"
)

// eventSourceMapping polls the work queue as Lambda's SQS event source
// mapping does: up to MaximumConcurrency pollers at once (one per sender
// emulator, as an emulator runs one invocation at a time), each
// receiving batches of up to batchSize messages with the queue's
// visibility timeout and invoking the sender with them; the messages the
// answer lists as batch item failures are left on the queue (made visible
// again at once, as the test cannot wait out the visibility timeout:
// each receive still counts towards the queue's maxReceiveCount, after
// which SQS moves the message to the dead-letter queue), the others
// deleted. It counts invocations, the most in flight at once, and the
// receives of the poison message body.
type eventSourceMapping struct {
	queue      queue.Queue
	queueURL   string
	template   events.SQSEvent
	batchSize  int
	visibility time.Duration
	senders    []*rieFunction
	poison     string

	mu                      sync.Mutex
	inFlight, maxInFlight   int
	invocations, poisonSeen int
	err                     error
}

// start runs one poller per sender until ctx ends; the channel is closed
// when all have stopped.
func (m *eventSourceMapping) start(ctx context.Context) <-chan struct{} {
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, f := range m.senders {
		wg.Go(func() {
			for ctx.Err() == nil {
				if err := m.pollOnce(ctx, f); err != nil && ctx.Err() == nil {
					m.fail(err)
					return
				}
			}
		})
	}
	go func() { wg.Wait(); close(done) }()
	return done
}

func (m *eventSourceMapping) pollOnce(ctx context.Context, f *rieFunction) error {
	msgs, err := m.queue.Receive(ctx, queue.ReceiveParams{Max: m.batchSize, VisibilityTimeout: m.visibility, Wait: time.Second})
	if err != nil || len(msgs) == 0 {
		return err
	}
	ev := events.SQSEvent{}
	m.mu.Lock()
	m.inFlight++
	m.maxInFlight = max(m.maxInFlight, m.inFlight)
	m.invocations++
	for _, msg := range msgs {
		if string(msg.Body) == m.poison {
			m.poisonSeen++
		}
	}
	m.mu.Unlock()
	for _, msg := range msgs {
		ev.Records = append(ev.Records, sqsEventFor(m.template, msg, m.queueURL).Records[0])
	}
	var resp events.SQSEventResponse
	err = f.invokeErr(ev, &resp)
	m.mu.Lock()
	m.inFlight--
	m.mu.Unlock()
	if err != nil {
		return err
	}
	failed := map[string]bool{}
	for _, fl := range resp.BatchItemFailures {
		failed[fl.ItemIdentifier] = true
	}
	// The mapping's own calls go on after a shutdown of the test's
	// polling: a batch in hand is always settled.
	settle := context.WithoutCancel(ctx)
	for _, msg := range msgs {
		if failed[msg.ID] {
			if err := m.queue.ChangeVisibility(settle, msg.ReceiptHandle, 0); err != nil && !errors.Is(err, queue.ErrNotFound) {
				return fmt.Errorf("make failed message visible: %w", err)
			}
			continue
		}
		if err := m.queue.Delete(settle, msg.ReceiptHandle); err != nil {
			return fmt.Errorf("delete: %w", err)
		}
	}
	return nil
}

func (m *eventSourceMapping) fail(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.err == nil {
		m.err = err
	}
}

func (m *eventSourceMapping) failed() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.err
}

func (m *eventSourceMapping) peak() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.maxInFlight
}

func (m *eventSourceMapping) batches() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.invocations
}

func (m *eventSourceMapping) poisonReceives() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.poisonSeen
}

// invokeErr is invoke for goroutines other than the test's: a failed
// invocation is returned, not fatal.
func (f *rieFunction) invokeErr(event any, out any) error {
	body, err := json.Marshal(event)
	if err != nil {
		return err
	}
	resp, err := http.Post(f.url, "application/json", bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s: invoke: %w", f.name, err)
	}
	defer resp.Body.Close()
	answer, _ := io.ReadAll(resp.Body)
	var fnErr struct {
		ErrorType string `json:"errorType"`
	}
	_ = json.Unmarshal(answer, &fnErr)
	if resp.StatusCode != http.StatusOK || fnErr.ErrorType != "" || resp.Header.Get("X-Amz-Function-Error") != "" {
		return fmt.Errorf("%s: invocation failed: HTTP %d %s", f.name, resp.StatusCode, answer)
	}
	return json.Unmarshal(answer, out)
}
