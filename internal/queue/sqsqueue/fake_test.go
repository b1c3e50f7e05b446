package sqsqueue

import (
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
)

// fakeSQS is an SQS JSON-protocol endpoint on 127.0.0.1 that records every
// request and answers from a script, so the adapter's request shapes and
// error mapping are checked against what real SQS sends, independent of
// any emulator's gaps.
type fakeSQS struct {
	t      *testing.T
	server *httptest.Server

	mu       sync.Mutex
	requests []fakeRequest
	answers  map[string][]fakeAnswer // by action, consumed in order; the last one repeats

	// hold, when set, makes every request wait until it is closed or the
	// client goes away; arrived is signalled as each held request comes in.
	hold    chan struct{}
	arrived chan struct{}
}

// fakeRequest is one recorded call.
type fakeRequest struct {
	Action string
	Body   map[string]any
}

// fakeAnswer is one scripted response.
type fakeAnswer struct {
	Status     int
	Body       string
	QueryError string // X-Amzn-Query-Error header, as real SQS sends it
}

func newFakeSQS(t *testing.T) *fakeSQS {
	t.Helper()
	f := &fakeSQS{t: t, answers: map[string][]fakeAnswer{}, arrived: make(chan struct{}, 16)}
	f.server = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.server.Close)
	return f
}

func (f *fakeSQS) serve(w http.ResponseWriter, r *http.Request) {
	target := r.Header.Get("X-Amz-Target")
	action, ok := strings.CutPrefix(target, "AmazonSQS.")
	if !ok {
		http.Error(w, "bad target "+target, http.StatusBadRequest)
		return
	}
	raw, _ := io.ReadAll(r.Body)
	var body map[string]any
	if err := json.Unmarshal(raw, &body); err != nil {
		http.Error(w, "bad json", http.StatusBadRequest)
		return
	}
	f.mu.Lock()
	hold := f.hold
	f.mu.Unlock()
	if hold != nil {
		f.arrived <- struct{}{}
		select {
		case <-hold:
		case <-r.Context().Done():
		}
		return
	}
	f.mu.Lock()
	f.requests = append(f.requests, fakeRequest{Action: action, Body: body})
	answers := f.answers[action]
	var a fakeAnswer
	switch len(answers) {
	case 0:
		a = fakeAnswer{Status: 200, Body: "{}"}
	case 1:
		a = answers[0]
	default:
		a = answers[0]
		f.answers[action] = answers[1:]
	}
	f.mu.Unlock()
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	if a.QueryError != "" {
		w.Header().Set("X-Amzn-Query-Error", a.QueryError)
	}
	if a.Status == 0 {
		a.Status = 200
	}
	w.WriteHeader(a.Status)
	_, _ = io.WriteString(w, a.Body)
}

// holdRequests makes every later request wait until release is closed.
func (f *fakeSQS) holdRequests(release chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.hold = release
}

// answer scripts the responses to action.
func (f *fakeSQS) answer(action string, answers ...fakeAnswer) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.answers[action] = answers
}

// calls returns the recorded requests.
func (f *fakeSQS) calls() []fakeRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]fakeRequest(nil), f.requests...)
}

// client returns an SQS client aimed at the fake, without retries.
func (f *fakeSQS) client() *sqs.Client {
	return sqs.New(sqs.Options{
		Region:       "us-east-1",
		BaseEndpoint: aws.String(f.server.URL),
		Credentials:  credentials.NewStaticCredentialsProvider("test", "test", ""),
		Retryer:      aws.NopRetryer{},
	})
}

// queue returns the adapter over the fake.
func (f *fakeSQS) queue() *Queue {
	return New(f.client(), f.server.URL+"/000000000000/q.fifo")
}

// fakeMessage is one message in a scripted ReceiveMessage answer.
type fakeMessage struct {
	ID, Handle, Body string
	Attributes       map[string]string
}

// messagesJSON renders a ReceiveMessage answer with correct body digests
// (the SDK verifies them).
func messagesJSON(msgs ...fakeMessage) string {
	type wire struct {
		MessageId     string
		ReceiptHandle string
		Body          string
		MD5OfBody     string
		Attributes    map[string]string
	}
	out := struct{ Messages []wire }{}
	for _, m := range msgs {
		out.Messages = append(out.Messages, wire{m.ID, m.Handle, m.Body, md5Hex(m.Body), m.Attributes})
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// md5Hex is the digest SQS reports for a body.
func md5Hex(s string) string {
	sum := md5.Sum([]byte(s))
	return hex.EncodeToString(sum[:])
}
