package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// SignatureHeader is the header that carries a delivery's signature.
const SignatureHeader = "Qunfa-Signature"

// DefaultTolerance is how old a signature receivers should accept: older
// ones are replays (docs/webhooks.md).
const DefaultTolerance = 5 * time.Minute

// Sign returns the Qunfa-Signature value of body sent at t:
// "t=<unix seconds>,v1=<hex HMAC-SHA256 of "<t>.<body>" with secret>".
func Sign(secret string, t time.Time, body []byte) string {
	ts := strconv.FormatInt(t.Unix(), 10)
	return "t=" + ts + ",v1=" + mac(secret, ts, body)
}

func mac(secret, ts string, body []byte) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(ts))
	m.Write([]byte{'.'})
	m.Write(body)
	return hex.EncodeToString(m.Sum(nil))
}

// Errors of Verify.
var (
	ErrBadSignature = errors.New("webhook: signature does not match")
	ErrStale        = errors.New("webhook: signature timestamp outside the tolerance")
	ErrMalformed    = errors.New("webhook: malformed signature header")
)

// Verify checks a Qunfa-Signature header value for body as a receiver
// should: the HMAC must match (any of several v1 values, for secret
// rotation) and t must be within tolerance of now (replay protection).
func Verify(header, secret string, body []byte, now time.Time, tolerance time.Duration) error {
	var (
		ts  string
		sig []string
	)
	for _, part := range strings.Split(header, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(part), "=")
		if !ok {
			return ErrMalformed
		}
		switch k {
		case "t":
			ts = v
		case "v1":
			sig = append(sig, v)
		}
	}
	sec, err := strconv.ParseInt(ts, 10, 64)
	if err != nil || len(sig) == 0 {
		return ErrMalformed
	}
	want := mac(secret, ts, body)
	ok := false
	for _, s := range sig {
		ok = ok || hmac.Equal([]byte(s), []byte(want))
	}
	if !ok {
		return ErrBadSignature
	}
	if d := now.Sub(time.Unix(sec, 0)); d > tolerance || d < -tolerance {
		return fmt.Errorf("%w: signed %s ago", ErrStale, d.Round(time.Second))
	}
	return nil
}
