package main

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
)

// Recipient file formats of submit --recipients.
const (
	formatCSV    = "text/csv"
	formatNDJSON = "application/x-ndjson"
)

// defaultPartBytes is the part size submit --recipients cuts a file into:
// what passes API Gateway (DESIGN.md, "Staged submission").
const defaultPartBytes = 4 << 20

// minPartBytes keeps --part-size from making absurdly many parts.
const minPartBytes = 64

// filePart is one part cut from a recipients file. Body is valid until the
// next call of next.
type filePart struct {
	Number int
	Body   []byte
	// FirstLine is the file line of the part's first record (after the
	// repeated header of a CSV part).
	FirstLine int
	// LastLine is the file line of its last record's end.
	LastLine int
	// FileBytes is how much of the file the part covers (its repeated
	// header not counted), for progress.
	FileBytes int64
}

// partCutter cuts a recipients file into parts of at most max bytes at
// record boundaries (lines; a CSV record may span lines inside quotes),
// repeating a CSV file's header row at the start of every part. It holds
// one part and one record at a time, whatever the file's size.
type partCutter struct {
	r           *bufio.Reader
	csv         bool
	max         int
	header      []byte // CSV: the header record, newline included
	headerLines int
	headerBytes int // the header's size in the file (a byte-order mark included)
	line        int // file lines read so far
	number      int // parts cut so far
	part        []byte
	pend        []byte // a record read but not yet in a part
	pendLine    int    // its first file line
	pendLines   int    // its line count
	pendAdded   int    // 1 when its newline is not in the file (the last line)
	eof         bool
}

func newPartCutter(r io.Reader, mediaType string, max int) *partCutter {
	return &partCutter{r: bufio.NewReaderSize(r, 64<<10), csv: mediaType == formatCSV, max: max}
}

// lineError is a problem with the file at a line.
type lineError struct {
	line int
	msg  string
}

func (e *lineError) Error() string { return fmt.Sprintf("line %d: %s", e.line, e.msg) }

// record reads the next record into c.pend (nil at the end of the file).
func (c *partCutter) record() error {
	c.pend = c.pend[:0]
	c.pendLine, c.pendLines, c.pendAdded = c.line+1, 0, 0
	quoted := false
	for {
		chunk, err := c.r.ReadSlice('\n')
		if len(c.pend)+len(chunk) > c.max {
			return &lineError{c.pendLine, fmt.Sprintf("a record of more than %d bytes does not fit in a part (--part-size)", c.max)}
		}
		c.pend = append(c.pend, chunk...)
		if c.csv {
			quoted = quoted != (bytes.Count(chunk, []byte{'"'})%2 == 1)
		}
		switch {
		case err == nil:
			c.line++
			c.pendLines++
			if !quoted {
				return nil
			}
		case errors.Is(err, bufio.ErrBufferFull):
		case errors.Is(err, io.EOF):
			c.eof = true
			if len(c.pend) > 0 {
				c.line++
				c.pendLines++
				c.pend = append(c.pend, '\n')
				c.pendAdded = 1
			}
			if quoted {
				return &lineError{c.pendLine, "a quoted field is not closed before the end of the file"}
			}
			return nil
		default:
			return err
		}
	}
}

// next returns the next part, or io.EOF after the last.
func (c *partCutter) next() (filePart, error) {
	if c.csv && c.header == nil {
		if err := c.record(); err != nil {
			return filePart{}, err
		}
		if len(c.pend) == 0 {
			return filePart{}, &lineError{1, "the file is empty: a CSV file begins with the header row account,to[,ref][,var.<name>...]"}
		}
		c.header = append([]byte(nil), bytes.TrimPrefix(c.pend, []byte("\xef\xbb\xbf"))...)
		c.headerLines = c.pendLines
		c.headerBytes = len(c.pend) - c.pendAdded
		c.pend = c.pend[:0]
	}
	c.part = append(c.part[:0], c.header...)
	p := filePart{FirstLine: c.line + 1}
	if c.number == 0 {
		p.FileBytes = int64(c.headerBytes)
	}
	records := 0
	for {
		if len(c.pend) == 0 {
			if c.eof {
				break
			}
			if err := c.record(); err != nil {
				return filePart{}, err
			}
			if len(c.pend) == 0 {
				continue
			}
		}
		if len(c.part)+len(c.pend) > c.max {
			if len(c.part) == len(c.header) {
				return filePart{}, &lineError{c.pendLine, fmt.Sprintf("the header and this record are more than %d bytes together (--part-size)", c.max)}
			}
			break
		}
		if records == 0 {
			p.FirstLine = c.pendLine
		}
		c.part = append(c.part, c.pend...)
		p.LastLine = c.pendLine + c.pendLines - 1
		p.FileBytes += int64(len(c.pend) - c.pendAdded)
		if len(bytes.TrimSpace(c.pend)) > 0 {
			records++
		}
		c.pend = c.pend[:0]
	}
	if records == 0 {
		return filePart{}, io.EOF // nothing but blank lines left
	}
	c.number++
	p.Number, p.Body = c.number, c.part
	return p, nil
}

// fileLine maps a line number of a part (as the API reports it in a 422)
// to the file's line number.
func (c *partCutter) fileLine(p filePart, partLine int) int {
	if c.csv {
		if partLine <= c.headerLines {
			return partLine
		}
		partLine -= c.headerLines
	}
	return p.FirstLine + partLine - 1
}

// fileField rewrites a field error's "line N" (or "line N.field") of a
// part to the file's line.
func (c *partCutter) fileField(p filePart, field string) string {
	rest, ok := strings.CutPrefix(field, "line ")
	if !ok {
		return field
	}
	digits := len(rest) - len(strings.TrimLeft(rest, "0123456789"))
	n, err := strconv.Atoi(rest[:digits])
	if err != nil {
		return field
	}
	return "line " + strconv.Itoa(c.fileLine(p, n)) + rest[digits:]
}
