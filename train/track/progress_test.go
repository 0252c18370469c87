package track

import (
	"bytes"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestProgressSilentWhenNotATerminal(t *testing.T) {
	var buf bytes.Buffer
	p := NewProgress(&buf, 10)
	p.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: 1}})
	p.Eval(Record{Step: 1, Metrics: map[string]float64{MetricValLoss: 1}})
	require.NoError(t, p.Close())
	assert.Zero(t, buf.Len(), "a buffer is no terminal")

	f, err := os.Create(filepath.Join(t.TempDir(), "log.txt"))
	require.NoError(t, err)
	defer f.Close()
	p = NewProgress(f, 10)
	p.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: 1}})
	require.NoError(t, p.Close())
	info, err := f.Stat()
	require.NoError(t, err)
	assert.Zero(t, info.Size(), "a regular file is no terminal")
}

func TestProgressLine(t *testing.T) {
	eta := 83 * time.Second
	// 100 columns: head 15, tail 49, percentage 5, brackets 2 and one free column leave a
	// bar of 28 cells, 12% of which is 3.
	assert.Equal(t,
		"step  120/1000 [###-------------------------]  12%  epoch 0  loss 0.43210  812 samples/s  ETA 1m23s",
		progressLine(120, 1000, 0, 0.4321, 812.4, eta, 100))
	// A wide terminal: the bar stops at 30 cells.
	assert.Equal(t,
		"step  120/1000 [###---------------------------]  12%  epoch 0  loss 0.43210  812 samples/s  ETA 1m23s",
		progressLine(120, 1000, 0, 0.4321, 812.4, eta, 200))
	// A narrow one: a bar of 10 and the line cut to 39 columns.
	narrow := progressLine(500, 1000, 3, 0.25, 100, eta, 40)
	assert.Equal(t, "step  500/1000 [#####-----]  50%  epoch", narrow)
	// Unknown total, unknown throughput, no ETA yet.
	assert.Equal(t, "step 5  epoch 2  loss 1.00000", progressLine(5, 0, 2, 1, math.NaN(), -1, 80))
	assert.Equal(t, "step 10/10 [##############################] 100%  epoch 1",
		progressLine(10, 10, 1, math.NaN(), math.NaN(), -1, 200))
}

func TestFormatETA(t *testing.T) {
	assert.Equal(t, "0s", formatETA(0))
	assert.Equal(t, "45s", formatETA(45*time.Second))
	assert.Equal(t, "3m07s", formatETA(187*time.Second))
	assert.Equal(t, "2h05m", formatETA(7500*time.Second))
}

// fakeClock returns the times it is given, in turn.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time { return c.t }

func TestProgressRedrawsInPlaceWithETA(t *testing.T) {
	clock := &fakeClock{t: time.Unix(1000, 0)}
	var buf bytes.Buffer
	p := newProgress(&buf, 100, 120, clock.now)

	p.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: 2, MetricSamplesPerS: 50}})
	first := buf.String()
	assert.True(t, strings.HasPrefix(first, "\rstep   1/100 ["), first)
	assert.NotContains(t, first, "ETA", "no ETA before a second step")
	assert.True(t, strings.HasSuffix(first, "\x1b[K"), "clears the rest of the line")

	// Ten steps in ten seconds after the first: one second a step, 89 steps to go.
	clock.t = clock.t.Add(10 * time.Second)
	p.Step(Record{Step: 11, Metrics: map[string]float64{MetricLoss: 1.5, MetricSamplesPerS: 64}})
	assert.Contains(t, buf.String(), "ETA 1m29s")
	assert.Contains(t, buf.String(), "loss 1.50000  64 samples/s")

	// Steps closer together than the redraw interval are not drawn...
	n := strings.Count(buf.String(), "\r")
	clock.t = clock.t.Add(10 * time.Millisecond)
	p.Step(Record{Step: 12, Metrics: map[string]float64{MetricLoss: 1.4}})
	assert.Equal(t, n, strings.Count(buf.String(), "\r"))
	// ...but an evaluation leaves its line and redraws the latest bar.
	p.Eval(Record{Step: 12, Epoch: 0, Metrics: map[string]float64{MetricValLoss: 0.75, MetricValAccuracy: 0.8125}})
	out := buf.String()
	assert.Contains(t, out, "\repoch 0  step 12  val_loss 0.75  val_accuracy 81.25%\x1b[K\nstep  12/100")
	// ...and the last step always is.
	clock.t = clock.t.Add(time.Millisecond)
	p.Step(Record{Step: 100, Metrics: map[string]float64{MetricLoss: 0.5}})
	assert.Contains(t, buf.String(), "\rstep 100/100 [")
	assert.Contains(t, buf.String(), "ETA 0s")

	require.NoError(t, p.Close())
	assert.True(t, strings.HasSuffix(buf.String(), "\x1b[K\n"), "Close ends the line")
	size := buf.Len()
	p.Step(Record{Step: 101})
	require.NoError(t, p.Close())
	assert.Equal(t, size, buf.Len(), "nothing after Close")
}

func TestProgressWriteError(t *testing.T) {
	p := newProgress(&failingWriter{}, 10, 80, time.Now)
	p.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: 1}})
	err := p.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk full")
}

// Throughput keeps its digits below 10 samples/s: a step of seconds on one
// sequence reads 0.25, not 0.
func TestFormatRate(t *testing.T) {
	for _, c := range []struct {
		v    float64
		want string
	}{
		{812.4, "812"}, {64.04, "64"}, {10, "10"}, {9.96, "10.0"}, {5.34, "5.3"}, {0.25, "0.25"}, {0.004, "0.00"}, {0, "0.00"},
	} {
		assert.Equal(t, c.want, FormatRate(c.v), "%v", c.v)
	}
	assert.Contains(t, progressLine(3, 10, 0, 10.97, 0.25, time.Minute, 120), "loss 10.97000  0.25 samples/s")
}
