package mockprovider

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Delivery is one line of the delivery log: a message the mock accepted and
// delivered.
type Delivery struct {
	TS      time.Time `json:"ts"`
	GUID    string    `json:"guid"`
	ToID    string    `json:"toId"`
	Content string    `json:"content"`
	Key     string    `json:"key"`
}

// deliveryLog appends deliveries to a JSON-lines file and remembers every
// key it holds, for status look-ups. The file is opened with O_APPEND and
// each batch of lines goes out in one write call, so concurrent writers
// never interleave inside a line, and a line is in the kernel (it survives
// the process being killed) before the caller answers the client.
type deliveryLog struct {
	f    *os.File // nil when the log is not persisted
	keys sync.Map // message key → struct{}
}

// openDeliveryLog opens (creating it if needed) the log at path and loads
// the keys it already holds. An empty path keeps deliveries in memory only.
func openDeliveryLog(path string) (*deliveryLog, int, error) {
	l := &deliveryLog{}
	if path == "" {
		return l, 0, nil
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, 0, fmt.Errorf("open delivery log: %w", err)
	}
	n, err := l.load(f)
	if err != nil {
		_ = f.Close()
		return nil, 0, fmt.Errorf("load delivery log %s: %w", path, err)
	}
	l.f = f
	return l, n, nil
}

// load indexes the keys of every complete line of r and returns how many
// lines it read. A line that does not parse (only possible if someone else
// wrote to the file) is skipped.
func (l *deliveryLog) load(r io.Reader) (int, error) {
	br := bufio.NewReaderSize(r, 1<<16)
	n := 0
	for {
		line, err := br.ReadBytes('\n')
		if len(line) > 0 && line[len(line)-1] == '\n' {
			var d struct {
				Key string `json:"key"`
			}
			if json.Unmarshal(line, &d) == nil {
				n++
				if d.Key != "" {
					l.keys.Store(d.Key, struct{}{})
				}
			}
		}
		if errors.Is(err, io.EOF) {
			return n, nil
		}
		if err != nil {
			return n, err
		}
	}
}

// append writes the deliveries in one write call and then indexes their
// keys.
func (l *deliveryLog) append(ds []Delivery) error {
	if len(ds) == 0 {
		return nil
	}
	if l.f != nil {
		var buf []byte
		for i := range ds {
			b, err := json.Marshal(&ds[i])
			if err != nil {
				return fmt.Errorf("encode delivery: %w", err)
			}
			buf = append(buf, b...)
			buf = append(buf, '\n')
		}
		if _, err := l.f.Write(buf); err != nil {
			return fmt.Errorf("write delivery log: %w", err)
		}
	}
	for i := range ds {
		if ds[i].Key != "" {
			l.keys.Store(ds[i].Key, struct{}{})
		}
	}
	return nil
}

// delivered reports whether key is in the log.
func (l *deliveryLog) delivered(key string) bool {
	_, ok := l.keys.Load(key)
	return ok
}

func (l *deliveryLog) close() error {
	if l.f == nil {
		return nil
	}
	return l.f.Close()
}
