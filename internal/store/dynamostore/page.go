package dynamostore

import (
	"bytes"
	"compress/flate"
	"errors"
	"fmt"
	"io"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/qunfa/qunfa/internal/store"
)

// pageWidth is the seq range a status page covers: the items of one shard
// whose seq falls in [b×pageWidth, (b+1)×pageWidth) share the status page
// and the member list of block b. The mapping depends on (shard, seq) only,
// so it is the same for every writer and every retry.
const pageWidth = 256

// dataWidth is the seq range of one payload record (to, vars of up to 64
// items of any shard) of the jobs whose records are not sized by bytes:
// those created before payloadwidth.go, and those whose size came to 64.
const dataWidth = 64

// slot is the compact state of one item inside a status page.
type slot struct {
	status   byte  // statusCode of store.ItemStatus
	attempts int   // Item.Attempts
	next     int64 // NextAttemptAt, unix nanoseconds (0 = zero time)
	claim    int   // index into page.claims while submitted, else -1
	category string
	// Outcome details, kept to the second (see encodeSlots): sub is the
	// time of the latest claim (Item.SubmittedAt once the item left
	// submitted), fin the time it entered its terminal status, both unix
	// seconds (0 = none); msg says the provider gave a message id, kept in
	// page.msgs or in one of the page's msgid records.
	sub, fin int64
	msg      bool
}

// claimRef is one claim still referenced by a submitted item of the page.
type claimRef struct {
	id string
	at int64 // SubmittedAt, unix nanoseconds
}

// page is a decoded status page: the states of the members of one
// (shard, block), in seq order, and the claims they refer to.
type page struct {
	version int64
	slots   []slot
	claims  []claimRef
	// sub is the sticky "oldest submitted-at" index key (0 = absent).
	sub int64
	// base is the unix second the slots' times are written relative to
	// (0 = none yet; set by the first time written, then kept).
	base int64
	// msgs holds the message ids not yet moved to a msgid record, by
	// ordinal (deflateMsgs in the record); segs names the page's msgid
	// records, oldest first.
	msgs map[int]string
	segs []string
}

var statusCodes = map[store.ItemStatus]byte{
	store.ItemPending:   'p',
	store.ItemSubmitted: 's',
	store.ItemConfirmed: 'c',
	store.ItemFailed:    'f',
	store.ItemAbandoned: 'a',
}

func statusCode(s store.ItemStatus) (byte, bool) {
	c, ok := statusCodes[s]
	return c, ok
}

func statusOf(c byte) store.ItemStatus {
	for s, b := range statusCodes {
		if b == c {
			return s
		}
	}
	return store.ItemStatus("?" + string(c))
}

func nanos(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.UnixNano()
}

func fromNanos(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(0, n).UTC()
}

// secs is t in unix seconds, 0 for the zero time.
func secs(t time.Time) int64 {
	if t.IsZero() {
		return 0
	}
	return t.Unix()
}

func fromSecs(n int64) time.Time {
	if n == 0 {
		return time.Time{}
	}
	return time.Unix(n, 0).UTC()
}

// terminalCode reports whether a status code is final (confirmed, failed,
// abandoned).
func terminalCode(c byte) bool { return c == 'c' || c == 'f' || c == 'a' }

// carriesFailure reports whether an item in this state counts in
// Shard.Failures: failed and abandoned items with a category, and
// submitted items under review (category uncertain).
func carriesFailure(s slot) bool {
	if s.category == "" {
		return false
	}
	switch s.status {
	case 'f', 'a':
		return true
	case 's':
		return s.category == store.CategoryUncertain
	}
	return false
}

// encodeSlots writes the slots run-length encoded: consecutive equal slots
// become one run
// "<len>:<status><attempts>[@<next>][#<claim>][~<sub>][^<fin>][*][!<category>]",
// runs separated by ';'. sub and fin are seconds from base in base 36, so
// the items of one claim (one sub) settled by one update (one fin) stay one
// run; '*' marks items with a message id. A page of fresh items is
// "256:p0".
func encodeSlots(slots []slot, base int64) string {
	var b strings.Builder
	for i := 0; i < len(slots); {
		j := i + 1
		for j < len(slots) && slots[j] == slots[i] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		s := slots[i]
		b.WriteString(strconv.Itoa(j - i))
		b.WriteByte(':')
		b.WriteByte(s.status)
		b.WriteString(strconv.Itoa(s.attempts))
		if s.next != 0 {
			b.WriteByte('@')
			b.WriteString(strconv.FormatInt(s.next, 36))
		}
		if s.claim >= 0 {
			b.WriteByte('#')
			b.WriteString(strconv.Itoa(s.claim))
		}
		if s.sub != 0 {
			b.WriteByte('~')
			b.WriteString(strconv.FormatInt(s.sub-base, 36))
		}
		if s.fin != 0 {
			b.WriteByte('^')
			b.WriteString(strconv.FormatInt(s.fin-base, 36))
		}
		if s.msg {
			b.WriteByte('*')
		}
		if s.category != "" {
			b.WriteByte('!')
			b.WriteString(url.QueryEscape(s.category))
		}
		i = j
	}
	return b.String()
}

var errCorruptPage = errors.New("dynamostore: corrupt status page")

func decodeSlots(enc string, n int, base int64) ([]slot, error) {
	slots := make([]slot, 0, n)
	if enc == "" {
		if n != 0 {
			return nil, fmt.Errorf("%w: empty state for %d members", errCorruptPage, n)
		}
		return slots, nil
	}
	for _, run := range strings.Split(enc, ";") {
		lenStr, rest, ok := strings.Cut(run, ":")
		if !ok || rest == "" {
			return nil, fmt.Errorf("%w: run %q", errCorruptPage, run)
		}
		count, err := strconv.Atoi(lenStr)
		if err != nil || count <= 0 {
			return nil, fmt.Errorf("%w: run length %q", errCorruptPage, lenStr)
		}
		s := slot{status: rest[0], claim: -1}
		rest = rest[1:]
		if i := strings.IndexByte(rest, '!'); i >= 0 {
			cat, err := url.QueryUnescape(rest[i+1:])
			if err != nil {
				return nil, fmt.Errorf("%w: category %q", errCorruptPage, rest[i+1:])
			}
			s.category, rest = cat, rest[:i]
		}
		if r, ok := strings.CutSuffix(rest, "*"); ok {
			s.msg, rest = true, r
		}
		for _, f := range []struct {
			mark byte
			to   *int64
		}{{'^', &s.fin}, {'~', &s.sub}} {
			if i := strings.IndexByte(rest, f.mark); i >= 0 {
				off, err := strconv.ParseInt(rest[i+1:], 36, 64)
				if err != nil {
					return nil, fmt.Errorf("%w: time %q", errCorruptPage, rest[i+1:])
				}
				*f.to, rest = base+off, rest[:i]
			}
		}
		if i := strings.IndexByte(rest, '#'); i >= 0 {
			c, err := strconv.Atoi(rest[i+1:])
			if err != nil {
				return nil, fmt.Errorf("%w: claim %q", errCorruptPage, rest[i+1:])
			}
			s.claim, rest = c, rest[:i]
		}
		if i := strings.IndexByte(rest, '@'); i >= 0 {
			nx, err := strconv.ParseInt(rest[i+1:], 36, 64)
			if err != nil {
				return nil, fmt.Errorf("%w: next %q", errCorruptPage, rest[i+1:])
			}
			s.next, rest = nx, rest[:i]
		}
		a, err := strconv.Atoi(rest)
		if err != nil {
			return nil, fmt.Errorf("%w: attempts %q", errCorruptPage, rest)
		}
		s.attempts = a
		for k := 0; k < count; k++ {
			slots = append(slots, s)
		}
	}
	if len(slots) != n {
		return nil, fmt.Errorf("%w: %d states for %d members", errCorruptPage, len(slots), n)
	}
	return slots, nil
}

// encodeClaims writes claims as "<at base36>|<escaped id>" joined by ';'.
func encodeClaims(claims []claimRef) string {
	parts := make([]string, len(claims))
	for i, c := range claims {
		parts[i] = strconv.FormatInt(c.at, 36) + "|" + url.QueryEscape(c.id)
	}
	return strings.Join(parts, ";")
}

func decodeClaims(enc string) ([]claimRef, error) {
	if enc == "" {
		return nil, nil
	}
	var out []claimRef
	for _, part := range strings.Split(enc, ";") {
		atStr, idStr, ok := strings.Cut(part, "|")
		if !ok {
			return nil, fmt.Errorf("%w: claim %q", errCorruptPage, part)
		}
		at, err := strconv.ParseInt(atStr, 36, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: claim time %q", errCorruptPage, atStr)
		}
		id, err := url.QueryUnescape(idStr)
		if err != nil {
			return nil, fmt.Errorf("%w: claim id %q", errCorruptPage, idStr)
		}
		out = append(out, claimRef{id: id, at: at})
	}
	return out, nil
}

// compactClaims drops claims no submitted slot refers to and renumbers the
// rest, keeping the page small.
func (p *page) compactClaims() {
	used := make([]int, len(p.claims))
	for i := range used {
		used[i] = -1
	}
	var kept []claimRef
	for i := range p.slots {
		c := p.slots[i].claim
		if c < 0 {
			continue
		}
		if p.slots[i].status != 's' || c >= len(p.claims) {
			p.slots[i].claim = -1
			continue
		}
		if used[c] < 0 {
			used[c] = len(kept)
			kept = append(kept, p.claims[c])
		}
		p.slots[i].claim = used[c]
	}
	p.claims = kept
}

// addClaim returns the index of claim (id, at), adding it if new.
func (p *page) addClaim(id string, at int64) int {
	for i, c := range p.claims {
		if c.id == id && c.at == at {
			return i
		}
	}
	p.claims = append(p.claims, claimRef{id: id, at: at})
	return len(p.claims) - 1
}

// firstTime returns the earliest outcome time of the page's slots (0 if
// none).
func (p *page) firstTime() int64 {
	var first int64
	for _, s := range p.slots {
		for _, t := range []int64{s.sub, s.fin} {
			if t != 0 && (first == 0 || t < first) {
				first = t
			}
		}
	}
	return first
}

// minPendingNext returns the earliest NextAttemptAt of the page's pending
// items and whether there is any.
func (p *page) minPendingNext() (int64, bool) {
	var min int64
	found := false
	for _, s := range p.slots {
		if s.status == 'p' && (!found || s.next < min) {
			min, found = s.next, true
		}
	}
	return min, found
}

// minSubmittedAt returns the earliest SubmittedAt of the page's submitted
// items and whether there is any.
func (p *page) minSubmittedAt() (int64, bool) {
	var min int64
	found := false
	for _, s := range p.slots {
		if s.status == 's' && s.claim >= 0 && s.claim < len(p.claims) {
			at := p.claims[s.claim].at
			if !found || at < min {
				min, found = at, true
			}
		}
	}
	return min, found
}

// counts tallies the page's items by status and failure category.
func (p *page) counts(c *store.Counts, failures map[string]int64) {
	for _, s := range p.slots {
		switch s.status {
		case 'p':
			c.Pending++
		case 's':
			c.Submitted++
		case 'c':
			c.Confirmed++
		case 'f':
			c.Failed++
		default:
			c.Abandoned++
		}
		if carriesFailure(s) {
			failures[s.category]++
		}
		if s.status == 'c' && s.attempts > 1 {
			failures[store.TallyConfirmedAfterRetry]++
		}
	}
}

// members is the sorted list of seqs of one (shard, block), stored once in
// the member record and cached, mapping seqs to slot ordinals.
type members struct {
	account string
	seqs    []int64
	// dataWidth is the seq range of the job's payload records
	// (recordDataWidth of the member list).
	dataWidth int64
}

// ordinal returns the slot index of seq, or -1.
func (m *members) ordinal(seq int64) int {
	i := sort.Search(len(m.seqs), func(i int) bool { return m.seqs[i] >= seq })
	if i < len(m.seqs) && m.seqs[i] == seq {
		return i
	}
	return -1
}

// encodeMembers writes the seqs as offsets from the block start, runs of
// consecutive offsets as "<start>+<len>", joined by ','.
func encodeMembers(block int64, seqs []int64) string {
	var b strings.Builder
	base := block * pageWidth
	for i := 0; i < len(seqs); {
		j := i + 1
		for j < len(seqs) && seqs[j] == seqs[j-1]+1 {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(',')
		}
		b.WriteString(strconv.FormatInt(seqs[i]-base, 10))
		if j-i > 1 {
			b.WriteByte('+')
			b.WriteString(strconv.Itoa(j - i))
		}
		i = j
	}
	return b.String()
}

func decodeMembers(block int64, enc string) ([]int64, error) {
	var seqs []int64
	if enc == "" {
		return seqs, nil
	}
	base := block * pageWidth
	for _, part := range strings.Split(enc, ",") {
		startStr, lenStr, hasLen := strings.Cut(part, "+")
		start, err := strconv.ParseInt(startStr, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%w: member %q", errCorruptPage, part)
		}
		n := 1
		if hasLen {
			if n, err = strconv.Atoi(lenStr); err != nil || n <= 0 {
				return nil, fmt.Errorf("%w: member run %q", errCorruptPage, part)
			}
		}
		for k := 0; k < n; k++ {
			seqs = append(seqs, base+start+int64(k))
		}
	}
	for i := 1; i < len(seqs); i++ {
		if seqs[i] <= seqs[i-1] {
			return nil, fmt.Errorf("%w: members out of order", errCorruptPage)
		}
	}
	return seqs, nil
}

// encodeMsgs writes message ids by ordinal, "<ordinal>[+<len>]=<escaped
// id>" joined by ';' in ordinal order: a run of consecutive ordinals with
// one id (the recipients of one multi-recipient call) is written once.
func encodeMsgs(m map[int]string) string {
	ords := make([]int, 0, len(m))
	for o := range m {
		ords = append(ords, o)
	}
	sort.Ints(ords)
	var b strings.Builder
	for i := 0; i < len(ords); {
		j := i + 1
		for j < len(ords) && ords[j] == ords[j-1]+1 && m[ords[j]] == m[ords[i]] {
			j++
		}
		if b.Len() > 0 {
			b.WriteByte(';')
		}
		b.WriteString(strconv.Itoa(ords[i]))
		if j-i > 1 {
			b.WriteByte('+')
			b.WriteString(strconv.Itoa(j - i))
		}
		b.WriteByte('=')
		b.WriteString(url.QueryEscape(m[ords[i]]))
		i = j
	}
	return b.String()
}

func decodeMsgs(enc string) (map[int]string, error) {
	m := map[int]string{}
	if enc == "" {
		return m, nil
	}
	for _, part := range strings.Split(enc, ";") {
		run, idStr, ok := strings.Cut(part, "=")
		oStr, lenStr, hasLen := strings.Cut(run, "+")
		o, err := strconv.Atoi(oStr)
		if !ok || err != nil || o < 0 {
			return nil, fmt.Errorf("%w: message id %q", errCorruptPage, part)
		}
		n := 1
		if hasLen {
			if n, err = strconv.Atoi(lenStr); err != nil || n <= 0 || n > pageWidth {
				return nil, fmt.Errorf("%w: message id run %q", errCorruptPage, part)
			}
		}
		id, err := url.QueryUnescape(idStr)
		if err != nil {
			return nil, fmt.Errorf("%w: message id %q", errCorruptPage, part)
		}
		for k := 0; k < n; k++ {
			m[o+k] = id
		}
	}
	return m, nil
}

// deflaters and inflaters are reused: a flate writer or reader allocates
// its tables (hundreds of KB for a writer) when made, and status pages
// with message ids are deflated on every write.
var (
	deflaters = sync.Pool{New: func() any {
		w, _ := flate.NewWriter(nil, flate.BestSpeed) // a valid level: no error
		return w
	}}
	inflaters = sync.Pool{New: func() any { return flate.NewReader(bytes.NewReader(nil)) }}
)

// deflateMsgs is encodeMsgs deflated: ids of one provider share most of
// their characters (numbered or prefixed ids shrink 3 to 4 times, random
// ones by a quarter), so more of them stay in the page.
func deflateMsgs(m map[int]string) []byte {
	var b bytes.Buffer
	w := deflaters.Get().(*flate.Writer)
	defer deflaters.Put(w)
	w.Reset(&b)
	_, _ = w.Write([]byte(encodeMsgs(m))) // a bytes.Buffer takes any write
	_ = w.Close()
	return b.Bytes()
}

func inflateMsgs(z []byte) (map[int]string, error) {
	if len(z) == 0 {
		return map[int]string{}, nil
	}
	r := inflaters.Get().(io.ReadCloser)
	defer inflaters.Put(r)
	if err := r.(flate.Resetter).Reset(bytes.NewReader(z), nil); err != nil {
		return nil, fmt.Errorf("%w: message ids: %w", errCorruptPage, err)
	}
	raw, err := io.ReadAll(r)
	if err != nil {
		return nil, fmt.Errorf("%w: message ids: %w", errCorruptPage, err)
	}
	return decodeMsgs(string(raw))
}

// getB returns a binary attribute (nil if absent).
func getB(m map[string]types.AttributeValue, name string) []byte {
	if v, ok := m[name].(*types.AttributeValueMemberB); ok {
		return v.Value
	}
	return nil
}

// recordSize approximates DynamoDB's size of a record: attribute names
// plus values (a number counted by its digits, an upper bound).
func recordSize(m map[string]types.AttributeValue) int {
	n := 0
	for name, v := range m {
		n += len(name)
		switch v := v.(type) {
		case *types.AttributeValueMemberS:
			n += len(v.Value)
		case *types.AttributeValueMemberN:
			n += len(v.Value)
		case *types.AttributeValueMemberB:
			n += len(v.Value)
		default:
			n++
		}
	}
	return n
}

// writeUnits is what one write of a record of size n bytes costs.
func writeUnits(n int) int { return (n + 1023) / 1024 }
