package devstack

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/queue"
)

// HeldMessages keeps the messages invocations are working invisible, by
// renewing their visibility, until the invocation decides about each: it
// is the queue the handler is given, and a Delete or ChangeVisibility of a
// held message (done, handed back, made visible again) ends its renewal
// first. So the visibility of a received message can stay short — what a
// killed process held comes back soon — without a long turn's message
// reappearing while it is still being worked, and without a renewal
// overriding the handler's own hand-back delay.
type HeldMessages struct {
	queue.Queue
	mu   sync.Mutex
	held map[string]*heldMessage // by receipt handle
}

// heldMessage is one message being renewed. Its mutex orders a renewal and
// the handler's own decision: after release returns, no renewal of the
// message is in progress or will start.
type heldMessage struct {
	mu       sync.Mutex
	released bool
}

// NewHeldMessages wraps q.
func NewHeldMessages(q queue.Queue) *HeldMessages {
	return &HeldMessages{Queue: q, held: map[string]*heldMessage{}}
}

// hold starts renewing the messages of handles.
func (h *HeldMessages) hold(handles []string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, r := range handles {
		h.held[r] = &heldMessage{}
	}
}

// release ends the renewal of handle (no-op for one not held).
func (h *HeldMessages) release(handle string) {
	h.mu.Lock()
	m := h.held[handle]
	delete(h.held, handle)
	h.mu.Unlock()
	if m != nil {
		m.mu.Lock()
		m.released = true
		m.mu.Unlock()
	}
}

// renew sets the visibility of every handle still held to d.
func (h *HeldMessages) renew(ctx context.Context, handles []string, d time.Duration, log *slog.Logger) {
	for _, r := range handles {
		h.mu.Lock()
		m := h.held[r]
		h.mu.Unlock()
		if m == nil {
			continue
		}
		m.mu.Lock()
		if !m.released {
			if err := h.Queue.ChangeVisibility(ctx, r, d); err != nil && ctx.Err() == nil {
				log.Warn("renew the visibility of a work message", slog.Any("err", err))
			}
		}
		m.mu.Unlock()
	}
}

// Delete ends the message's renewal, then deletes it.
func (h *HeldMessages) Delete(ctx context.Context, receiptHandle string) error {
	h.release(receiptHandle)
	return h.Queue.Delete(ctx, receiptHandle)
}

// ChangeVisibility ends the message's renewal, then sets its visibility.
func (h *HeldMessages) ChangeVisibility(ctx context.Context, receiptHandle string, d time.Duration) error {
	h.release(receiptHandle)
	return h.Queue.ChangeVisibility(ctx, receiptHandle, d)
}
