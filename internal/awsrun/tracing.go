package awsrun

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"

	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-xray-sdk-go/instrumentation/awsv2"
	"github.com/aws/aws-xray-sdk-go/strategy/ctxmissing"
	"github.com/aws/aws-xray-sdk-go/xray"
	"github.com/aws/aws-xray-sdk-go/xraylog"
	"github.com/aws/smithy-go/middleware"
	smithyhttp "github.com/aws/smithy-go/transport/http"
)

// X-Ray tracing of what a function calls. Lambda traces each invocation
// (Tracing: Active) and hands the function the trace header; the X-Ray SDK
// makes a facade segment of it, under which every AWS SDK call (DynamoDB,
// SQS, EventBridge, Scheduler, Secrets Manager) and every provider HTTP
// call becomes a sub-segment, sent to the daemon Lambda runs
// (AWS_XRAY_DAEMON_ADDRESS) when Lambda sampled the invocation. Outside
// Lambda (qunfa dev, tests, the runtime emulator) nothing is instrumented:
// no middleware, no wrapped transport, no UDP.
//
// The same goes for the other calls a function makes to addresses it is
// given: webhook deliveries and the pages of requery campaigns' sources.
//
// An HTTP sub-segment records the method, the URL without its query
// (the SDK strips it: WeChat and WeCom carry access_token there, gettoken
// the secret, a WeCom robot's webhook its key, a source its own token)
// and without userinfo (stripped before the SDK sees the request; the
// client has put it in the Authorization header already), and the
// status; never a header (a webhook's signature) or a body.

// Tracing environment: set by Lambda.
const (
	envLambdaFunctionName = "AWS_LAMBDA_FUNCTION_NAME"
	envXRayDaemonAddress  = "AWS_XRAY_DAEMON_ADDRESS"
	envXRaySDKDisabled    = "AWS_XRAY_SDK_DISABLED"
)

// TracingEnabled tells whether the process runs under Lambda with an X-Ray
// daemon to send to (getenv is os.Getenv).
func TracingEnabled(getenv func(string) string) bool {
	return getenv(envLambdaFunctionName) != "" && getenv(envXRayDaemonAddress) != "" &&
		!strings.EqualFold(getenv(envXRaySDKDisabled), "true")
}

// Tracing is what instruments a function's calls for X-Ray.
type Tracing struct{}

// StartTracing configures the X-Ray SDK for the function: segments go
// to the daemon at AWS_XRAY_DAEMON_ADDRESS, the SDK's own log
// lines go to log (warnings and errors only), and a call made outside an
// invocation (no trace header in its context) is simply not traced.
func StartTracing(log *slog.Logger) (*Tracing, error) {
	xray.SetLogger(xrayLogger{log: log})
	if err := xray.Configure(xray.Config{DaemonAddr: os.Getenv(envXRayDaemonAddress),
		ContextMissingStrategy: ctxmissing.NewDefaultIgnoreErrorStrategy()}); err != nil {
		return nil, fmt.Errorf("configure X-Ray: %w", err)
	}
	return &Tracing{}, nil
}

// AWSOption adds the X-Ray middleware to every AWS SDK client made from
// the configuration it loads: each call is a sub-segment, and its request
// carries the trace header (SQS keeps it as the message's AWSTraceHeader).
// On a nil Tracing it does nothing.
func (t *Tracing) AWSOption() func(*config.LoadOptions) error {
	return func(o *config.LoadOptions) error {
		if t != nil {
			awsv2.AWSV2Instrumentor(&o.APIOptions)
		}
		return nil
	}
}

// ClientOptions are the options of the AWS clients of fn: the X-Ray
// middleware when tracing (AWSOption), and for a function that ends its
// traces (Function.EndsTraces) one that takes the trace header off every
// request it sends, the X-Ray SDK's and the one the AWS SDK sets itself
// under Lambda from _X_AMZN_TRACE_ID. Its calls are still sub-segments of
// its trace, but what it puts on the work queue or the alert bus starts
// no traced invocation downstream: under PassThrough (template.yaml) the
// sender's next turns and the webhooks' deliveries of its outcomes are
// not traced, so a job's traces stay a handful whatever its size or pace.
func (t *Tracing) ClientOptions(fn Function) []func(*config.LoadOptions) error {
	opts := []func(*config.LoadOptions) error{t.AWSOption()}
	if fn.EndsTraces {
		opts = append(opts, config.WithAPIOptions([]func(*middleware.Stack) error{dropTraceHeader}))
	}
	return opts
}

// dropTraceHeader deletes X-Amzn-Trace-Id from a request just before it is
// sent: it runs last in the deserialize step, after the X-Ray middleware
// (first in that step) and the AWS SDK's recursion detection (build step)
// have set it.
func dropTraceHeader(s *middleware.Stack) error {
	return s.Deserialize.Add(middleware.DeserializeMiddlewareFunc("qunfaDropTraceHeader",
		func(ctx context.Context, in middleware.DeserializeInput, next middleware.DeserializeHandler) (middleware.DeserializeOutput, middleware.Metadata, error) {
			if r, ok := in.Request.(*smithyhttp.Request); ok {
				r.Header.Del(traceHeader)
			}
			return next.HandleDeserialize(ctx, in)
		}), middleware.After)
}

// traceHeader carries the trace id and the sampling decision downstream.
const traceHeader = "X-Amzn-Trace-Id"

// HTTPClient wraps an outbound HTTP client (providers, webhook
// deliveries, campaign sources) so that each call is a sub-segment named
// after the host; on a nil Tracing it returns c.
func (t *Tracing) HTTPClient(c *http.Client) *http.Client {
	if t == nil {
		return c
	}
	traced := xray.Client(c)
	traced.Transport = withoutUserinfo{next: traced.Transport}
	return traced
}

// withoutUserinfo hands on a request whose URL has no userinfo: the X-Ray
// SDK records a URL's user name (and its password as ***). The
// http.Client has turned the userinfo into the Authorization header before
// the transport sees the request.
type withoutUserinfo struct{ next http.RoundTripper }

func (w withoutUserinfo) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.URL.User == nil {
		return w.next.RoundTrip(r)
	}
	r2, u := *r, *r.URL
	u.User = nil
	r2.URL = &u
	return w.next.RoundTrip(&r2)
}

// xrayLogger writes the SDK's warnings and errors as the function's JSON
// log lines.
type xrayLogger struct{ log *slog.Logger }

func (l xrayLogger) Log(level xraylog.LogLevel, msg fmt.Stringer) {
	switch level {
	case xraylog.LogLevelError:
		l.log.Error("x-ray", slog.String("detail", msg.String()))
	case xraylog.LogLevelWarn:
		l.log.Warn("x-ray", slog.String("detail", msg.String()))
	}
}
