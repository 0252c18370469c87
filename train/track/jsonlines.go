package track

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"
	"strconv"
	"sync"
)

// metricOrder is the order in which the well-known metrics appear in a JSON line; other
// metrics follow, sorted by name.
var metricOrder = []string{
	MetricLoss, MetricLR, MetricGradNorm, MetricSamplesPerS, MetricSamples,
	MetricValLoss, MetricValAccuracy, MetricValSamples,
}

// NewJSONLines returns a tracker that writes one JSON object per record to w:
//
//	{"step":12,"epoch":0,"loss":0.5321,"lr":0.001,"grad_norm":1.25,"samples_per_s":812,"samples":64}
//	{"step":100,"epoch":0,"val_loss":0.41,"val_accuracy":0.87,"val_samples":10000}
//
// "step" and "epoch" come first, then the metrics: the well-known ones in the order above,
// others sorted by name. Numbers are written in the shortest form that reads back to the
// same float64; NaN and infinities, which JSON cannot express, are written as null.
// Close does not close w.
func NewJSONLines(w io.Writer) Tracker {
	return &jsonLines{w: w}
}

type jsonLines struct {
	mu     sync.Mutex
	w      io.Writer
	buf    []byte
	err    error
	closed bool
}

func (j *jsonLines) Step(r Record) { j.write(r) }
func (j *jsonLines) Eval(r Record) { j.write(r) }

func (j *jsonLines) write(r Record) {
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.closed || j.err != nil {
		return
	}
	j.buf = appendJSONRecord(j.buf[:0], r)
	if _, err := j.w.Write(j.buf); err != nil {
		j.err = fmt.Errorf("track: writing JSON line for step %d: %w", r.Step, err)
	}
}

func (j *jsonLines) Close() error {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.closed = true
	return j.err
}

func appendJSONRecord(b []byte, r Record) []byte {
	b = append(b, `{"step":`...)
	b = strconv.AppendInt(b, int64(r.Step), 10)
	b = append(b, `,"epoch":`...)
	b = strconv.AppendInt(b, int64(r.Epoch), 10)
	for _, name := range orderedNames(r.Metrics) {
		b = append(b, ',')
		b = appendJSONString(b, name)
		b = append(b, ':')
		b = appendJSONNumber(b, r.Metrics[name])
	}
	return append(b, "}\n"...)
}

// orderedNames lists the metric names of m: the well-known ones first, in metricOrder, then
// the others sorted.
func orderedNames(m map[string]float64) []string {
	names := make([]string, 0, len(m))
	known := make(map[string]bool, len(metricOrder))
	for _, name := range metricOrder {
		known[name] = true
		if _, ok := m[name]; ok {
			names = append(names, name)
		}
	}
	start := len(names)
	for name := range m {
		if !known[name] {
			names = append(names, name)
		}
	}
	sort.Strings(names[start:])
	return names
}

func appendJSONString(b []byte, s string) []byte {
	q, err := json.Marshal(s)
	if err != nil { // a string always marshals; keep the line valid regardless
		return append(b, `""`...)
	}
	return append(b, q...)
}

func appendJSONNumber(b []byte, v float64) []byte {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return append(b, "null"...)
	}
	return strconv.AppendFloat(b, v, 'g', -1, 64)
}
