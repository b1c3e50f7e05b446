package mockprovider

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/maphash"
	"io"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/qunfa/qunfa/internal/jsonshape"
)

// Delivery is one line of the delivery log: a message the mock accepted and
// delivered.
type Delivery struct {
	TS      time.Time `json:"ts"`
	GUID    string    `json:"guid"`
	ToID    string    `json:"toId"`
	Content string    `json:"content"`
	Key     string    `json:"key"`
	// Call numbers the account's calls (1, 2, …, since the mock started);
	// CallRecipients is how many recipients that call carried and
	// LatencyMS the latency the mock gave its answer (latency_ms plus
	// latency_per_recipient_ms per recipient). All three are written only
	// for calls with injected latency, so other lines keep the contract's
	// shape.
	Call           int64 `json:"call,omitempty"`
	CallRecipients int   `json:"call_recipients,omitempty"`
	LatencyMS      int64 `json:"latency_ms,omitempty"`
}

// deliveryLog appends deliveries to a JSON-lines file and indexes the keys
// it holds, for status look-ups. The file is opened with O_APPEND and each
// batch of lines goes out in one write call, so a line is in the kernel
// (it survives the process being killed) before the caller answers the
// client.
//
// A persisted log does not keep its keys in memory (a million keys took
// hundreds of MiB): the index maps a 64-bit hash of each key to the offset
// of the first line holding a key with that hash, and a look-up reads that
// line back to compare the key itself, so a hash collision never makes an
// undelivered key look delivered. A key whose hash is already taken by
// another key goes into collided, in full. A log kept in memory only
// (no path) remembers its keys.
type deliveryLog struct {
	f    *os.File                // nil when the log is not persisted
	hash func(key string) uint64 // maphash with a seed of this process; tests collide on purpose

	mu       sync.Mutex
	size     int64            // end of the file: where the next write lands
	index    map[uint64]int64 // hash of a key → offset of its first line
	collided map[string]struct{}
	keys     map[string]struct{} // the keys of a log not persisted
}

// openDeliveryLog opens (creating it if needed) the log at path and loads
// the keys it already holds. An empty path keeps deliveries in memory only.
func openDeliveryLog(path string) (*deliveryLog, int, error) {
	seed := maphash.MakeSeed()
	l := &deliveryLog{hash: func(k string) uint64 { return maphash.String(seed, k) }, index: map[uint64]int64{},
		collided: map[string]struct{}{}, keys: map[string]struct{}{}}
	if path == "" {
		return l, 0, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("open delivery log: %w", err)
	}
	l.f = f
	n, err := l.load(f)
	if err == nil {
		l.size, err = f.Seek(0, io.SeekEnd)
	}
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("load delivery log %s: %w", path, err)
	}
	return l, n, nil
}

// load indexes the keys of every complete line of r and returns how many
// lines it read. A line that does not parse (only possible if someone else
// wrote to the file) is skipped.
func (l *deliveryLog) load(r io.Reader) (int, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	n := 0
	var off int64
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			if key, ok := lineKey(line); ok {
				n++
				if key != "" {
					l.indexKey(key, off)
				}
			}
		}
		off += int64(len(line))
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// lineKey is the key of one line of the log.
func lineKey(line []byte) (string, bool) {
	var d struct {
		Key string `json:"key"`
	}
	if json.Unmarshal(line, &d) != nil {
		return "", false
	}
	return d.Key, true
}

// indexKey records that the line at off holds key. l.mu is held (or l is
// not shared yet).
func (l *deliveryLog) indexKey(key string, off int64) {
	if l.f == nil {
		l.keys[key] = struct{}{}
		return
	}
	h := l.hash(key)
	first, taken := l.index[h]
	if !taken {
		l.index[h] = off
		return
	}
	if other, err := l.keyAt(first); err != nil || other != key {
		l.collided[key] = struct{}{} // another key has this hash (or its line is unreadable): keep this one in full
	}
}

// keyAt reads back the key of the line at off.
func (l *deliveryLog) keyAt(off int64) (string, error) {
	buf := make([]byte, 512)
	var line []byte
	for {
		n, err := l.f.ReadAt(buf, off+int64(len(line)))
		if i := bytes.IndexByte(buf[:n], '\n'); i >= 0 {
			line = append(line, buf[:i+1]...)
			break
		}
		line = append(line, buf[:n]...)
		if err != nil {
			return "", fmt.Errorf("read delivery log at %d: %w", off, err)
		}
	}
	key, ok := lineKey(line)
	if !ok {
		return "", fmt.Errorf("delivery log line at %d does not parse", off)
	}
	return key, nil
}

// append writes the deliveries in one write call and then indexes their
// keys.
func (l *deliveryLog) append(ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		for i := range ds {
			if ds[i].Key != "" {
				l.keys[ds[i].Key] = struct{}{}
			}
		}
		return nil
	}
	var buf []byte
	offs := make([]int64, len(ds))
	for i := range ds {
		offs[i] = l.size + int64(len(buf))
		var err error
		if buf, err = appendDelivery(buf, &ds[i]); err != nil {
			return fmt.Errorf("encode delivery: %w", err)
		}
		buf = append(buf, '\n')
	}
	n, err := l.f.Write(buf)
	if err != nil {
		// Where the file ends now is the kernel's word, whatever was written.
		if end, serr := l.f.Seek(0, io.SeekEnd); serr == nil {
			l.size = end
		}
		return fmt.Errorf("write delivery log: %w", err)
	}
	l.size += int64(n)
	for i := range ds {
		if ds[i].Key != "" {
			l.indexKey(ds[i].Key, offs[i])
		}
	}
	return nil
}

// appendDelivery appends d to buf encoded byte for byte as json.Marshal
// encodes it (the log's format is a contract), without json.Marshal's
// reflection: at 100,000 deliveries a second that was a third of the
// mock's CPU.
func appendDelivery(buf []byte, d *Delivery) ([]byte, error) {
	buf = append(buf, `{"ts":"`...)
	buf, err := d.TS.AppendText(buf) // what MarshalJSON quotes
	if err != nil {
		return buf, err
	}
	buf = append(buf, `","guid":`...)
	buf = jsonshape.AppendString(buf, d.GUID)
	buf = append(buf, `,"toId":`...)
	buf = jsonshape.AppendString(buf, d.ToID)
	buf = append(buf, `,"content":`...)
	buf = jsonshape.AppendString(buf, d.Content)
	buf = append(buf, `,"key":`...)
	buf = jsonshape.AppendString(buf, d.Key)
	if d.Call != 0 {
		buf = append(buf, `,"call":`...)
		buf = strconv.AppendInt(buf, d.Call, 10)
	}
	if d.CallRecipients != 0 {
		buf = append(buf, `,"call_recipients":`...)
		buf = strconv.AppendInt(buf, int64(d.CallRecipients), 10)
	}
	if d.LatencyMS != 0 {
		buf = append(buf, `,"latency_ms":`...)
		buf = strconv.AppendInt(buf, d.LatencyMS, 10)
	}
	return append(buf, '}'), nil
}

// delivered reports whether key is in the log.
func (l *deliveryLog) delivered(key string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.f == nil {
		_, ok := l.keys[key]
		return ok
	}
	if _, ok := l.collided[key]; ok {
		return true
	}
	off, ok := l.index[l.hash(key)]
	if !ok {
		return false
	}
	other, err := l.keyAt(off)
	return err == nil && other == key
}

func (l *deliveryLog) close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}
