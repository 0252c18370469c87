package track

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
)

// Field numbers of TensorFlow's tensorflow/core/util/event.proto and
// tensorflow/core/framework/summary.proto, the messages TensorBoard reads.
const (
	eventWallTime    protowire.Number = 1 // double
	eventStep        protowire.Number = 2 // int64
	eventFileVersion protowire.Number = 3 // string
	eventSummary     protowire.Number = 5 // Summary

	summaryValue protowire.Number = 1 // repeated Summary.Value

	valueTag         protowire.Number = 1 // string
	valueSimpleValue protowire.Number = 2 // float
)

// tensorBoardFileVersion is the file_version of the first event of every event file.
const tensorBoardFileVersion = "brain.Event:2"

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// TensorBoard writes TensorBoard event files. Its methods are the Tracker's, plus Path.
type TensorBoard struct {
	mu     sync.Mutex
	path   string
	f      *os.File
	w      *bufio.Writer
	buf    []byte
	rec    []byte
	err    error
	closed bool
}

// NewTensorBoard creates dir if needed and an event file in it named
// events.out.tfevents.<unix seconds>.<host>, which TensorBoard reads (tensorboard --logdir dir).
// Every record becomes one Event at its step and wall time with one scalar per metric, tagged
// with the metric's name ("loss", "lr", "val_loss", ...). Each event is flushed to the file as
// it is written, so TensorBoard shows a run while it trains.
func NewTensorBoard(dir string) (Tracker, error) {
	tb, err := newTensorBoard(dir, time.Now())
	if err != nil {
		return nil, err
	}
	return tb, nil
}

func newTensorBoard(dir string, now time.Time) (*TensorBoard, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("track: TensorBoard log dir: %w", err)
	}
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "localhost"
	}
	host = strings.ReplaceAll(host, string(filepath.Separator), "_")
	base := filepath.Join(dir, fmt.Sprintf("events.out.tfevents.%010d.%s", now.Unix(), host))
	// Two trackers started in the same second in one folder get distinct files; TensorBoard
	// reads every file whose name contains "tfevents".
	path := base
	var f *os.File
	for i := 1; ; i++ {
		f, err = os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
		if err == nil {
			break
		}
		if !errors.Is(err, fs.ErrExist) || i > 1000 {
			return nil, fmt.Errorf("track: creating TensorBoard event file: %w", err)
		}
		path = fmt.Sprintf("%s.%d", base, i)
	}
	tb := &TensorBoard{path: path, f: f, w: bufio.NewWriter(f)}
	tb.buf = appendEvent(tb.buf[:0], now, 0, tensorBoardFileVersion, nil)
	tb.writeRecord(tb.buf)
	if tb.err != nil {
		f.Close()
		os.Remove(path)
		return nil, tb.err
	}
	return tb, nil
}

// Path returns the event file's path.
func (t *TensorBoard) Path() string { return t.path }

// Step writes the record's metrics as scalars at its step.
func (t *TensorBoard) Step(r Record) { t.write(r) }

// Eval writes the record's metrics as scalars at its step.
func (t *TensorBoard) Eval(r Record) { t.write(r) }

func (t *TensorBoard) write(r Record) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed || t.err != nil || len(r.Metrics) == 0 {
		return
	}
	t.buf = appendEvent(t.buf[:0], r.time(), int64(r.Step), "", r.Metrics)
	t.writeRecord(t.buf)
}

// writeRecord frames data as a TFRecord and flushes it to the file.
func (t *TensorBoard) writeRecord(data []byte) {
	t.rec = appendTFRecord(t.rec[:0], data)
	if _, err := t.w.Write(t.rec); err != nil {
		t.err = fmt.Errorf("track: writing %s: %w", t.path, err)
		return
	}
	if err := t.w.Flush(); err != nil {
		t.err = fmt.Errorf("track: writing %s: %w", t.path, err)
	}
}

// Close closes the event file.
func (t *TensorBoard) Close() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return t.err
	}
	t.closed = true
	if err := t.w.Flush(); err != nil && t.err == nil {
		t.err = fmt.Errorf("track: writing %s: %w", t.path, err)
	}
	if err := t.f.Close(); err != nil && t.err == nil {
		t.err = fmt.Errorf("track: closing %s: %w", t.path, err)
	}
	return t.err
}

// appendEvent encodes an Event: wall time in seconds, step, and either a file version or a
// summary with one simple (float32) value per metric, in the order orderedNames gives.
func appendEvent(b []byte, wall time.Time, step int64, fileVersion string, metrics map[string]float64) []byte {
	b = protowire.AppendTag(b, eventWallTime, protowire.Fixed64Type)
	b = protowire.AppendFixed64(b, math.Float64bits(unixSeconds(wall)))
	if step != 0 {
		b = protowire.AppendTag(b, eventStep, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(step))
	}
	if fileVersion != "" {
		b = protowire.AppendTag(b, eventFileVersion, protowire.BytesType)
		b = protowire.AppendString(b, fileVersion)
	}
	if len(metrics) == 0 {
		return b
	}
	var summary []byte
	for _, name := range orderedNames(metrics) {
		var value []byte
		value = protowire.AppendTag(value, valueTag, protowire.BytesType)
		value = protowire.AppendString(value, name)
		value = protowire.AppendTag(value, valueSimpleValue, protowire.Fixed32Type)
		value = protowire.AppendFixed32(value, math.Float32bits(float32(metrics[name])))
		summary = protowire.AppendTag(summary, summaryValue, protowire.BytesType)
		summary = protowire.AppendBytes(summary, value)
	}
	b = protowire.AppendTag(b, eventSummary, protowire.BytesType)
	return protowire.AppendBytes(b, summary)
}

// appendTFRecord frames data as TFRecord does: the length as a little-endian uint64, the
// masked CRC-32C of those 8 bytes, the data, and the masked CRC-32C of the data.
func appendTFRecord(b, data []byte) []byte {
	var length [8]byte
	binary.LittleEndian.PutUint64(length[:], uint64(len(data)))
	b = append(b, length[:]...)
	b = binary.LittleEndian.AppendUint32(b, maskedCRC(length[:]))
	b = append(b, data...)
	return binary.LittleEndian.AppendUint32(b, maskedCRC(data))
}

// maskedCRC is TFRecord's checksum: CRC-32C rotated right by 15 bits plus 0xa282ead8.
func maskedCRC(data []byte) uint32 {
	c := crc32.Checksum(data, castagnoli)
	return (c>>15 | c<<17) + 0xa282ead8
}

// unixSeconds returns t in seconds since 1970, TensorBoard's wall_time: the whole seconds
// (exact in a float64) plus the fraction. UnixNano itself does not fit a float64's 53 bits,
// so dividing it by 1e9 would be off by up to a quarter of a microsecond.
func unixSeconds(t time.Time) float64 {
	return float64(t.Unix()) + float64(t.Nanosecond())/1e9
}
