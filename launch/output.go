package launch

import (
	"bytes"
	"io"
	"sync"
)

// maxLineBytes bounds how much of a line without a newline a lineWriter
// holds before it writes the piece out as a line of its own.
const maxLineBytes = 64 << 10

// sharedWriter serialises whole lines from several workers onto one
// destination, so that lines never interleave mid-way.
type sharedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *sharedWriter) writeLine(prefix, line []byte) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(prefix) == 0 {
		_, _ = s.w.Write(line)
		return
	}
	buf := make([]byte, 0, len(prefix)+len(line))
	buf = append(buf, prefix...)
	buf = append(buf, line...)
	// A failing destination (a closed terminal) must not stop a worker:
	// its output is lost, the training goes on.
	_, _ = s.w.Write(buf)
}

// lineWriter is one worker stream (its stdout or stderr): it cuts what the
// worker writes into lines and writes each, with the prefix, to dst.
// A nil dst drops everything.
type lineWriter struct {
	mu     sync.Mutex
	dst    *sharedWriter
	prefix []byte
	buf    []byte
}

func newLineWriter(dst *sharedWriter, prefix string) *lineWriter {
	return &lineWriter{dst: dst, prefix: []byte(prefix)}
}

// Write implements io.Writer for exec.Cmd's copying goroutine.
func (l *lineWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dst == nil {
		return len(p), nil
	}
	l.buf = append(l.buf, p...)
	for {
		i := bytes.IndexByte(l.buf, '\n')
		if i < 0 {
			break
		}
		l.dst.writeLine(l.prefix, l.buf[:i+1])
		l.buf = l.buf[i+1:]
	}
	for len(l.buf) >= maxLineBytes {
		piece := append(append([]byte(nil), l.buf[:maxLineBytes]...), '\n')
		l.dst.writeLine(l.prefix, piece)
		l.buf = l.buf[maxLineBytes:]
	}
	if len(l.buf) == 0 {
		l.buf = nil // let a large backing array go
	}
	return len(p), nil
}

// flush writes a last line that had no newline, ending it with one.
func (l *lineWriter) flush() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.dst == nil || len(l.buf) == 0 {
		return
	}
	l.dst.writeLine(l.prefix, append(l.buf, '\n'))
	l.buf = nil
}
