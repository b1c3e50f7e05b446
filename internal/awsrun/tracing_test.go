package awsrun_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	awsmiddleware "github.com/aws/aws-sdk-go-v2/aws/middleware"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/qunfa/qunfa/internal/api"
	"github.com/qunfa/qunfa/internal/awsrun"
	"github.com/qunfa/qunfa/internal/campaign"
	"github.com/qunfa/qunfa/internal/handlers"
	"github.com/qunfa/qunfa/internal/mockprovider"
	"github.com/qunfa/qunfa/internal/provider"
	"github.com/qunfa/qunfa/internal/provider/wecomapp"
	"github.com/qunfa/qunfa/internal/queue"
	"github.com/qunfa/qunfa/internal/queue/sqsqueue"
	"github.com/qunfa/qunfa/internal/store"
	"github.com/qunfa/qunfa/internal/store/dynamostore"
	"github.com/qunfa/qunfa/internal/webhook"
	"github.com/qunfa/qunfa/internal/webhook/httppost"
)

// xrayDaemon is a fake X-Ray daemon: it keeps the segment documents the
// SDK sends it over UDP on 127.0.0.1.
type xrayDaemon struct {
	conn *net.UDPConn
	mu   sync.Mutex
	raw  [][]byte
}

func newXRayDaemon(t *testing.T) *xrayDaemon {
	t.Helper()
	conn, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	d := &xrayDaemon{conn: conn}
	t.Cleanup(func() { _ = conn.Close() })
	go func() {
		buf := make([]byte, 64<<10)
		for {
			n, _, err := conn.ReadFromUDP(buf)
			if err != nil {
				return
			}
			d.mu.Lock()
			d.raw = append(d.raw, bytes.Clone(buf[:n]))
			d.mu.Unlock()
		}
	}()
	return d
}

func (d *xrayDaemon) addr() string { return d.conn.LocalAddr().String() }

// packets is everything received so far.
func (d *xrayDaemon) packets() [][]byte {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([][]byte(nil), d.raw...)
}

// xraySegment is the part of a segment document the tests read.
type xraySegment struct {
	TraceID   string         `json:"trace_id"`
	ID        string         `json:"id"`
	ParentID  string         `json:"parent_id"`
	Name      string         `json:"name"`
	Namespace string         `json:"namespace"`
	AWS       map[string]any `json:"aws"`
	HTTP      struct {
		Request struct {
			Method string `json:"method"`
			URL    string `json:"url"`
		} `json:"request"`
		Response struct {
			Status int `json:"status"`
		} `json:"response"`
	} `json:"http"`
	Subsegments []xraySegment `json:"subsegments"`
}

// segments decodes every packet ("header\ndocument") and flattens the
// documents and their nested sub-segments.
func (d *xrayDaemon) segments(t *testing.T) []xraySegment {
	t.Helper()
	var out []xraySegment
	var walk func(s xraySegment)
	walk = func(s xraySegment) {
		out = append(out, s)
		for _, sub := range s.Subsegments {
			if sub.TraceID == "" {
				sub.TraceID = s.TraceID
			}
			walk(sub)
		}
	}
	for _, p := range d.packets() {
		header, doc, ok := bytes.Cut(p, []byte("\n"))
		if !ok || !bytes.Contains(header, []byte(`"format"`)) {
			t.Fatalf("not an X-Ray daemon packet: %q", p)
		}
		var s xraySegment
		if err := json.Unmarshal(doc, &s); err != nil {
			t.Fatalf("segment document %s: %v", doc, err)
		}
		walk(s)
	}
	return out
}

// waitFor polls the daemon until match finds what it wants (the SDK sends
// from the goroutine that closes a sub-segment, so it is there soon).
func (d *xrayDaemon) waitFor(t *testing.T, what string, match func([]xraySegment) bool) []xraySegment {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		segs := d.segments(t)
		if match(segs) {
			return segs
		}
		if time.Now().After(deadline) {
			t.Fatalf("no %s among the segments received: %+v", what, segs)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// headerRecorder keeps the X-Ray trace header of every AWS request as it
// goes out, by operation.
type headerRecorder struct {
	mu      sync.Mutex
	headers map[string][]string
}

// option adds the recorder at the end of the clients' deserialize step,
// just before the request is sent.
func (h *headerRecorder) option() func(*config.LoadOptions) error {
	return config.WithAPIOptions([]func(*middleware.Stack) error{func(s *middleware.Stack) error {
		return s.Deserialize.Add(middleware.DeserializeMiddlewareFunc("recordTraceHeader",
			func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
				if r, ok := in.Request.(*smithyhttp.Request); ok {
					h.mu.Lock()
					op := awsmiddleware.GetOperationName(ctx)
					h.headers[op] = append(h.headers[op], r.Header.Get("X-Amzn-Trace-Id"))
					h.mu.Unlock()
				}
				return next.HandleDeserialize(ctx, in)
			}), middleware.After)
	}})
}

func (h *headerRecorder) of(op string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]string(nil), h.headers[op]...)
}

// lambdaContext is the context aws-lambda-go hands a handler for an
// invocation Lambda traced with trace root, sampled.
func lambdaContext(ctx context.Context, root string) context.Context {
	return context.WithValue(ctx, "x-amzn-trace-id", "Root="+root+";Parent=53995c3f42cd8ad8;Sampled=1") //nolint:staticcheck // aws-lambda-go's key
}

func find(segs []xraySegment, match func(xraySegment) bool) []xraySegment {
	var out []xraySegment
	for _, s := range segs {
		if match(s) {
			out = append(out, s)
		}
	}
	return out
}

// TestTracingSubsegments runs the submit and sender handlers, built as
// Run builds them under Lambda with tracing, in invocations Lambda traced
// (the trace header aws-lambda-go puts in the context), against dynalite,
// the SQS emulator and the mock provider, with a fake X-Ray daemon: every
// DynamoDB, SQS and provider call is a sub-segment of the invocation's
// trace, the work message goes out with the trace header, and no
// recorded URL carries a query.
func TestTracingSubsegments(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	awsEnv(t)
	daemon := newXRayDaemon(t)
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "qunfa-sender")
	t.Setenv("AWS_XRAY_DAEMON_ADDRESS", daemon.addr())
	if !awsrun.TracingEnabled(os.Getenv) {
		t.Fatal("tracing not enabled under Lambda with a daemon address")
	}
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	tracing, err := awsrun.StartTracing(log)
	if err != nil {
		t.Fatal(err)
	}

	admin, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	table, queueURL, bus := stackInfra(t, ctx, admin, "qunfa-xray-")
	mock, err := mockprovider.New(mockprovider.Config{LogPath: t.TempDir() + "/deliveries.jsonl", Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = mock.Close() })
	prov := httptest.NewServer(mock.Handler())
	t.Cleanup(prov.Close)
	env := map[string]string{
		awsrun.EnvTable: table, awsrun.EnvQueueURL: queueURL, awsrun.EnvLogLevel: "warn", awsrun.EnvAlertBus: bus,
		awsrun.EnvCampaignRulePrefix: "qxray-c-", awsrun.EnvCampaignTarget: "arn:aws:lambda:us-east-1:123456789012:function:submit",
		awsrun.EnvProviderURL: prov.URL, awsrun.EnvProviderConnectTimeout: "1s", awsrun.EnvProviderTimeout: "2s",
		awsrun.EnvClaimBatch: "10", awsrun.EnvConcurrency: "4", awsrun.EnvMaxWait: "1s",
		awsrun.EnvTurnDuration: "10s", awsrun.EnvDeadlineMargin: "6s",
	}
	rec := &headerRecorder{headers: map[string][]string{}}
	build := func(fn awsrun.Function) *awsrun.Core {
		cfg, err := awsrun.Load(fn, func(k string) string { return env[k] })
		if err != nil {
			t.Fatal(err)
		}
		clients, err := awsrun.NewClients(ctx, tracing.AWSOption(), rec.option())
		if err != nil {
			t.Fatal(err)
		}
		clients.Tracing = tracing
		core, err := awsrun.Build(cfg, clients, log)
		if err != nil {
			t.Fatal(err)
		}
		return core
	}
	submitCore, senderCore := build(awsrun.Submit), build(awsrun.Sender)

	st := dynamostore.New(admin.DynamoDB, table, dynamostore.Options{Logger: log})
	if err := st.PutToken(ctx, api.HashToken("qf_example_token"), "tenant-a"); err != nil {
		t.Fatal(err)
	}
	if err := st.GrantAccount(ctx, "tenant-a", "acct-x", time.Time{}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutAccount(ctx, store.Account{Tenant: "tenant-a", ID: "acct-x", RatePerSec: 50, Burst: 50}); err != nil {
		t.Fatal(err)
	}

	// The API invocation: submit a job of one recipient.
	const apiRoot, senderRoot = "1-6744f2a0-aaaaaaaaaaaaaaaaaaaaaaaa", "1-6744f2a1-bbbbbbbbbbbbbbbbbbbbbbbb"
	body, _ := json.Marshal(map[string]any{"name": "traced", "template": "hi {{n}}",
		"recipients": []submitRecipient{{Account: "acct-x", To: "u-1", Vars: map[string]string{"n": "1"}}}})
	var post events.APIGatewayV2HTTPRequest
	readEvent(t, "submit-api.json", &post)
	post.Body = string(body)
	post.Headers["idempotency-key"] = "traced"
	raw, _ := json.Marshal(post)
	out, err := handlers.Submit(submitCore.API, submitCore.Campaigns, log)(lambdaContext(ctx, apiRoot), raw)
	if resp, ok := out.(events.APIGatewayV2HTTPResponse); err != nil || !ok || resp.StatusCode != http.StatusAccepted {
		t.Fatalf("submit: %v %+v", err, out)
	}
	// The work message went to SQS with the API invocation's trace
	// header, which SQS keeps as the message's AWSTraceHeader.
	sends := append(rec.of("SendMessage"), rec.of("SendMessageBatch")...)
	if len(sends) == 0 || !strings.HasPrefix(sends[0], "Root="+apiRoot+";") || !strings.Contains(sends[0], "Sampled=1") {
		t.Fatalf("SendMessage trace headers = %q, want the API invocation's trace %s", sends, apiRoot)
	}

	// The sender invocation: the work message, as the SQS poller hands it.
	var template events.SQSEvent
	readEvent(t, "sender-sqs.json", &template)
	msgs, err := sqsqueue.New(admin.SQS, queueURL).Receive(ctx, queue.ReceiveParams{Max: 1, VisibilityTimeout: 30 * time.Second, Wait: time.Second})
	if err != nil || len(msgs) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(msgs))
	}
	ictx, icancel := context.WithTimeout(lambdaContext(ctx, senderRoot), 15*time.Second)
	resp, err := handlers.Sender(senderCore.Sender, log)(ictx, sqsEventFor(template, msgs[0], queueURL))
	icancel()
	if err != nil || len(resp.BatchItemFailures) != 0 {
		t.Fatalf("sender: %v %+v", err, resp)
	}

	provHost := strings.TrimPrefix(prov.URL, "http://")
	segs := daemon.waitFor(t, "DynamoDB, SQS and provider sub-segments", func(segs []xraySegment) bool {
		return len(find(segs, func(s xraySegment) bool { return s.TraceID == apiRoot && s.Name == "DynamoDB" })) > 0 &&
			len(find(segs, func(s xraySegment) bool { return s.TraceID == apiRoot && s.Name == "SQS" })) > 0 &&
			len(find(segs, func(s xraySegment) bool { return s.TraceID == senderRoot && s.Name == "DynamoDB" })) > 0 &&
			len(find(segs, func(s xraySegment) bool { return s.TraceID == senderRoot && s.Name == provHost })) > 0
	})
	for _, s := range find(segs, func(s xraySegment) bool { return s.Name == "DynamoDB" || s.Name == "SQS" }) {
		if s.Namespace != "aws" || s.AWS["operation"] == nil || s.ParentID == "" {
			t.Errorf("AWS sub-segment %+v: want namespace aws, its operation and a parent", s)
		}
	}
	calls := find(segs, func(s xraySegment) bool { return s.Name == provHost })
	for _, s := range calls {
		if s.Namespace != "remote" || s.HTTP.Request.Method != http.MethodPost || !strings.HasPrefix(s.HTTP.Request.URL, prov.URL+"/") ||
			strings.Contains(s.HTTP.Request.URL, "?") || s.HTTP.Response.Status != http.StatusOK {
			t.Errorf("provider sub-segment %+v: want a remote POST to %s, no query, answered 200", s, prov.URL)
		}
	}
}

// TestTracingKeepsProviderTokensOut calls a WeCom application through the
// adapter the sender wires, its HTTP client wrapped by the tracing, in a
// traced invocation: the gettoken and message/send calls are sub-segments
// whose URLs have no query, and neither the application secret nor the
// access token is anywhere in what reaches the X-Ray daemon.
func TestTracingKeepsProviderTokensOut(t *testing.T) {
	daemon := newXRayDaemon(t)
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "qunfa-sender")
	t.Setenv("AWS_XRAY_DAEMON_ADDRESS", daemon.addr())
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	tracing, err := awsrun.StartTracing(log)
	if err != nil {
		t.Fatal(err)
	}
	m, err := mockprovider.New(mockprovider.Config{Protocol: mockprovider.ProtocolWecomApp, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	var mu sync.Mutex
	var tokens []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if tok := r.URL.Query().Get("access_token"); tok != "" {
			mu.Lock()
			tokens = append(tokens, tok)
			mu.Unlock()
		}
		m.Handler().ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	const secret = "corp-secret-7f3a9c"
	c, err := wecomapp.New(wecomapp.Config{BaseURL: srv.URL, Secret: secret, Logger: log, WrapHTTP: tracing.HTTPClient})
	if err != nil {
		t.Fatal(err)
	}
	const root = "1-6744f2a2-cccccccccccccccccccccccc"
	res, err := c.Send(lambdaContext(context.Background(), root),
		provider.SendRequest{Account: "ww-trace:1000002", To: []string{"u1"}, Keys: []string{"k1"}, Content: "hi"})
	if err != nil || len(res.Recipients) != 1 || !res.Recipients[0].Accepted {
		t.Fatalf("send: %v %+v", err, res)
	}
	mu.Lock()
	sent := append([]string(nil), tokens...)
	mu.Unlock()
	if len(sent) == 0 {
		t.Fatal("the adapter sent no access_token: the test checks nothing")
	}

	host := strings.TrimPrefix(srv.URL, "http://")
	segs := daemon.waitFor(t, "gettoken and message/send sub-segments", func(segs []xraySegment) bool {
		return len(find(segs, func(s xraySegment) bool {
			return s.Name == host && strings.HasSuffix(s.HTTP.Request.URL, "/cgi-bin/gettoken")
		})) > 0 &&
			len(find(segs, func(s xraySegment) bool {
				return s.Name == host && strings.HasSuffix(s.HTTP.Request.URL, "/cgi-bin/message/send")
			})) > 0
	})
	for _, s := range find(segs, func(s xraySegment) bool { return s.Name == host }) {
		if s.TraceID != root || strings.Contains(s.HTTP.Request.URL, "?") {
			t.Errorf("provider sub-segment %+v: want trace %s and a URL without its query", s, root)
		}
	}
	for _, p := range daemon.packets() {
		for _, leak := range append([]string{secret}, sent...) {
			if bytes.Contains(p, []byte(leak)) {
				t.Errorf("a segment sent to X-Ray carries a credential: %s", p)
			}
		}
	}
}

// TestTracingOffOutsideLambda: qunfa dev, the tests and the runtime
// emulator have no daemon address, or no Lambda: nothing is instrumented.
func TestTracingOffOutsideLambda(t *testing.T) {
	for _, env := range []map[string]string{
		{},
		{"AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000"},
		{"AWS_LAMBDA_FUNCTION_NAME": "qunfa-sender"},
		{"AWS_LAMBDA_FUNCTION_NAME": "qunfa-sender", "AWS_XRAY_DAEMON_ADDRESS": "127.0.0.1:2000", "AWS_XRAY_SDK_DISABLED": "TRUE"},
	} {
		if awsrun.TracingEnabled(func(k string) string { return env[k] }) {
			t.Errorf("tracing enabled with %v", env)
		}
	}
	var off *awsrun.Tracing
	c := &http.Client{}
	if off.HTTPClient(c) != c {
		t.Error("no tracing wraps the provider client")
	}
	var o config.LoadOptions
	if err := off.AWSOption()(&o); err != nil || len(o.APIOptions) != 0 {
		t.Errorf("no tracing adds %d AWS middlewares (%v)", len(o.APIOptions), err)
	}
}

// TestTracingWebhooksAndCampaignSources: the webhook deliverer's and the
// campaign source's HTTP calls, as Build wires them under Lambda with
// tracing, are sub-segments of the invocation's trace, named after the
// host, with URLs that have neither a query nor userinfo; neither the
// webhook's secret, its signature, a robot's key, a source's token nor a
// password in a URL reaches the X-Ray daemon. (Build's clients refuse
// loopback addresses, so these calls end at the dial: the sub-segment is
// made all the same. An endpoint that answers is traced with its status,
// the second half.)
func TestTracingWebhooksAndCampaignSources(t *testing.T) {
	daemon := newXRayDaemon(t)
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "qunfa-webhooks")
	t.Setenv("AWS_XRAY_DAEMON_ADDRESS", daemon.addr())
	t.Setenv("AWS_REGION", "us-east-1")
	t.Setenv("AWS_ACCESS_KEY_ID", "test")
	t.Setenv("AWS_SECRET_ACCESS_KEY", "test")
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	log := slog.New(slog.NewJSONHandler(io.Discard, nil))
	tracing, err := awsrun.StartTracing(log)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	clients, err := awsrun.NewClients(ctx, tracing.AWSOption())
	if err != nil {
		t.Fatal(err)
	}
	clients.Tracing = tracing
	env := map[string]string{awsrun.EnvTable: "qunfa-xray", awsrun.EnvQueueURL: "http://127.0.0.1:1/000000000000/q.fifo", awsrun.EnvAlertBus: "bus"}
	cfg, err := awsrun.Load(awsrun.Webhooks, func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	core, err := awsrun.Build(cfg, clients, log)
	if err != nil {
		t.Fatal(err)
	}

	const (
		secret    = "whsec-5d1e0b7a"
		robotKey  = "robot-key-93c1"
		srcToken  = "source-token-4b2f"
		user, pwd = "hook-user-61", "hook-pass-0e"
	)
	body := []byte(`{"type":"job.finished"}`)
	sig := webhook.Sign(secret, time.Unix(1_800_000_000, 0), body)
	const hookRoot, sourceRoot = "1-6744f2a3-dddddddddddddddddddddddd", "1-6744f2a4-eeeeeeeeeeeeeeeeeeeeeeee"
	if _, err := core.WebhookDeliverer.Poster.Post(lambdaContext(ctx, hookRoot), webhook.Request{
		URL:    "http://" + user + ":" + pwd + "@127.0.0.1:9/hooks/qunfa?key=" + robotKey,
		Header: http.Header{webhook.SignatureHeader: {sig}}, Body: body,
	}); err == nil {
		t.Fatal("a webhook to a loopback address was posted")
	}
	if _, err := core.Campaigns.Source.FetchPage(lambdaContext(ctx, sourceRoot), campaign.FetchParams{
		Source: "https://" + user + ":" + pwd + "@127.0.0.1:9/recipients?token=" + srcToken,
	}); err == nil {
		t.Fatal("a campaign source at a loopback address was read")
	}
	segs := daemon.waitFor(t, "webhook and campaign source sub-segments", func(segs []xraySegment) bool {
		return len(find(segs, func(s xraySegment) bool { return s.TraceID == hookRoot && s.Name == "127.0.0.1:9" })) > 0 &&
			len(find(segs, func(s xraySegment) bool { return s.TraceID == sourceRoot && s.Name == "127.0.0.1:9" })) > 0
	})
	for root, want := range map[string]string{hookRoot: "http://127.0.0.1:9/hooks/qunfa", sourceRoot: "https://127.0.0.1:9/recipients"} {
		for _, s := range find(segs, func(s xraySegment) bool { return s.TraceID == root && s.Name == "127.0.0.1:9" }) {
			if s.Namespace != "remote" || s.HTTP.Request.URL != want {
				t.Errorf("sub-segment %+v: want a remote call recorded as %s", s, want)
			}
		}
	}

	// An endpoint that answers: the status is recorded, the rest is not.
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if u, p, ok := r.BasicAuth(); !ok || u != user || p != pwd {
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(srv.Close)
	const answeredRoot = "1-6744f2a5-ffffffffffffffffffffffff"
	poster := httppost.New(httppost.Config{AllowPrivate: true, WrapHTTP: tracing.HTTPClient})
	hostPort := strings.TrimPrefix(srv.URL, "http://")
	ans, err := poster.Post(lambdaContext(ctx, answeredRoot), webhook.Request{
		URL:    "http://" + user + ":" + pwd + "@" + hostPort + "/hooks/qunfa?key=" + robotKey,
		Header: http.Header{webhook.SignatureHeader: {sig}}, Body: body,
	})
	if err != nil || ans.Status != http.StatusNoContent {
		t.Fatalf("post: %v %+v (the userinfo must still authenticate the call)", err, ans)
	}
	segs = daemon.waitFor(t, "the answered webhook's sub-segment", func(segs []xraySegment) bool {
		return len(find(segs, func(s xraySegment) bool { return s.TraceID == answeredRoot && s.Name == hostPort })) > 0
	})
	for _, s := range find(segs, func(s xraySegment) bool { return s.TraceID == answeredRoot && s.Name == hostPort }) {
		if s.HTTP.Request.Method != http.MethodPost || s.HTTP.Request.URL != srv.URL+"/hooks/qunfa" || s.HTTP.Response.Status != http.StatusNoContent {
			t.Errorf("sub-segment %+v: want POST %s/hooks/qunfa answered 204", s, srv.URL)
		}
	}
	for _, p := range daemon.packets() {
		for _, leak := range []string{secret, sig, robotKey, srcToken, user, pwd} {
			if bytes.Contains(p, []byte(leak)) {
				t.Errorf("a segment sent to X-Ray carries %q: %s", leak, p)
			}
		}
	}
}

// TestTracingEndsAtTheSender sends a work message as the sender and as
// submit would, with the AWS clients Run makes for each under Lambda, in
// invocations Lambda traced and sampled (the context's header, and
// _X_AMZN_TRACE_ID, from which the AWS SDK sets the header itself): the
// sender's SendMessage is still a sub-segment of its trace but goes out
// without X-Amzn-Trace-Id, so the next turn it queues starts no traced
// invocation of the PassThrough sender; submit's carries its trace.
func TestTracingEndsAtTheSender(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	awsEnv(t)
	daemon := newXRayDaemon(t)
	t.Setenv("AWS_LAMBDA_FUNCTION_NAME", "qunfa-sender")
	t.Setenv("AWS_XRAY_DAEMON_ADDRESS", daemon.addr())
	tracing, err := awsrun.StartTracing(slog.New(slog.NewJSONHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	admin, err := awsrun.NewClients(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, queueURL, _ := stackInfra(t, ctx, admin, "qunfa-xend-")

	const senderRoot, submitRoot = "1-6744f2a2-cccccccccccccccccccccccc", "1-6744f2a3-dddddddddddddddddddddddd"
	send := func(fn awsrun.Function, root string) []string {
		t.Setenv("_X_AMZN_TRACE_ID", "Root="+root+";Parent=53995c3f42cd8ad8;Sampled=1")
		rec := &headerRecorder{headers: map[string][]string{}}
		clients, err := awsrun.NewClients(ctx, append(tracing.ClientOptions(fn), rec.option())...)
		if err != nil {
			t.Fatal(err)
		}
		q := sqsqueue.New(clients.SQS, queueURL)
		if _, err := q.Send(lambdaContext(ctx, root), queue.SendParams{Group: "s-" + fn.Name, DedupID: fn.Name, Body: []byte("{}")}); err != nil {
			t.Fatalf("%s send: %v", fn.Name, err)
		}
		return rec.of("SendMessage")
	}
	if got := send(awsrun.Sender, senderRoot); len(got) != 1 || got[0] != "" {
		t.Errorf("sender's SendMessage trace headers %q, want one request without the header", got)
	}
	if got := send(awsrun.Submit, submitRoot); len(got) != 1 || !strings.HasPrefix(got[0], "Root="+submitRoot+";") || !strings.Contains(got[0], "Sampled=1") {
		t.Errorf("submit's SendMessage trace headers %q, want its sampled trace %s", got, submitRoot)
	}
	daemon.waitFor(t, "the sender's SQS sub-segment", func(segs []xraySegment) bool {
		return len(find(segs, func(s xraySegment) bool { return s.TraceID == senderRoot && s.Name == "SQS" })) > 0
	})
}
