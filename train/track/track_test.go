package track

import (
	"bytes"
	"errors"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// recorder is a Tracker that remembers what it was given.
type recorder struct {
	steps, evals []Record
	closed       int
	closeErr     error
}

func (r *recorder) Step(rec Record) { r.steps = append(r.steps, rec) }
func (r *recorder) Eval(rec Record) { r.evals = append(r.evals, rec) }
func (r *recorder) Close() error {
	r.closed++
	return r.closeErr
}

func TestMultiFansOutAndJoinsErrors(t *testing.T) {
	errA, errB := errors.New("a failed"), errors.New("b failed")
	a, b, c := &recorder{closeErr: errA}, &recorder{}, &recorder{closeErr: errB}
	m := Multi(a, nil, b, c)

	m.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: 2}})
	m.Step(Record{Step: 2, Metrics: map[string]float64{MetricLoss: 1}})
	m.Eval(Record{Step: 2, Metrics: map[string]float64{MetricValLoss: 1.5}})
	err := m.Close()

	for _, r := range []*recorder{a, b, c} {
		require.Len(t, r.steps, 2)
		assert.Equal(t, 2, r.steps[1].Step)
		require.Len(t, r.evals, 1)
		assert.Equal(t, 1.5, r.evals[0].Metrics[MetricValLoss])
		assert.Equal(t, 1, r.closed)
	}
	require.Error(t, err)
	assert.ErrorIs(t, err, errA)
	assert.ErrorIs(t, err, errB)
}

func TestMultiOfOneOrNone(t *testing.T) {
	a := &recorder{}
	assert.Same(t, a, Multi(nil, a))
	none := Multi(nil, nil)
	none.Step(Record{Step: 1})
	assert.NoError(t, none.Close())
}

func TestRecordValue(t *testing.T) {
	r := Record{Metrics: map[string]float64{MetricLR: 0.1}}
	v, ok := r.Value(MetricLR)
	assert.True(t, ok)
	assert.Equal(t, 0.1, v)
	_, ok = r.Value(MetricLoss)
	assert.False(t, ok)
	_, ok = Record{}.Value(MetricLoss)
	assert.False(t, ok, "a record without metrics has none")
}

func TestTrackersAreSafeForConcurrentUse(t *testing.T) {
	var buf lockedBuffer
	prom, err := ServePrometheus("127.0.0.1:0")
	require.NoError(t, err)
	dir := t.TempDir()
	tb, err := NewTensorBoard(dir)
	require.NoError(t, err)
	curve := NewLossCurve(dir + "/loss.png").(*LossCurve)
	trackers := []Tracker{NewJSONLines(&buf), prom, tb, curve}

	const goroutines, steps = 4, 50
	done := make(chan struct{})
	for g := range goroutines {
		go func() {
			defer func() { done <- struct{}{} }()
			for i := range steps {
				r := Record{Step: g*steps + i + 1, Metrics: map[string]float64{MetricLoss: 1, MetricSamples: 2}}
				for _, tr := range trackers {
					tr.Step(r)
				}
			}
		}()
	}
	for range goroutines {
		<-done
	}
	assert.Equal(t, "400", sample(t, scrape(t, prom.Addr()), "onnxtrain_samples_total"))
	for _, tr := range trackers {
		require.NoError(t, tr.Close())
	}
	assert.Equal(t, goroutines*steps, strings.Count(buf.String(), "\n"))
	require.Len(t, curve.train, goroutines*steps)
	for i, p := range curve.train {
		require.Equal(t, float64(i+1), p.x, "sorted by step on Close")
	}
	assert.Len(t, readEvents(t, tb.(*TensorBoard).Path()), 1+goroutines*steps)
}

type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
