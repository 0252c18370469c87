package track

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestJSONLinesFormat(t *testing.T) {
	var buf bytes.Buffer
	j := NewJSONLines(&buf)
	j.Step(Record{Step: 12, Epoch: 0, Metrics: map[string]float64{
		MetricSamples: 64, MetricGradNorm: 1.25, MetricLoss: 0.5321, MetricLR: 1e-3,
		MetricSamplesPerS: 812.5, "zeta": 2, "alpha": math.NaN(),
	}})
	j.Eval(Record{Step: 100, Epoch: 1, Metrics: map[string]float64{
		MetricValAccuracy: 0.87, MetricValLoss: 0.41, MetricValSamples: 10000,
	}})
	j.Step(Record{Step: 101, Epoch: 1, Metrics: map[string]float64{MetricLoss: math.Inf(1), `q"uote`: 1}})
	require.NoError(t, j.Close())
	j.Step(Record{Step: 102}) // ignored after Close

	want := `{"step":12,"epoch":0,"loss":0.5321,"lr":0.001,"grad_norm":1.25,"samples_per_s":812.5,"samples":64,"alpha":null,"zeta":2}
{"step":100,"epoch":1,"val_loss":0.41,"val_accuracy":0.87,"val_samples":10000}
{"step":101,"epoch":1,"loss":null,"q\"uote":1}
`
	assert.Equal(t, want, buf.String())

	// Every line is a JSON object that reads back to the values written.
	sc := bufio.NewScanner(&buf)
	var objs []map[string]any
	for sc.Scan() {
		var obj map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &obj), sc.Text())
		objs = append(objs, obj)
	}
	require.Len(t, objs, 3)
	assert.Equal(t, 0.5321, objs[0]["loss"])
	assert.Equal(t, 10000.0, objs[1]["val_samples"])
	assert.Nil(t, objs[2]["loss"])
}

func TestJSONLinesShortestRoundTrip(t *testing.T) {
	var buf bytes.Buffer
	j := NewJSONLines(&buf)
	a, b := 0.1, 0.2
	v := a + b // 0.30000000000000004 in float64: every digit is needed
	j.Step(Record{Step: 1, Metrics: map[string]float64{MetricLoss: v, MetricLR: 3e-21}})
	require.NoError(t, j.Close())
	assert.Equal(t, `{"step":1,"epoch":0,"loss":0.30000000000000004,"lr":3e-21}`+"\n", buf.String())
	var obj struct{ Loss, LR float64 }
	require.NoError(t, json.Unmarshal(buf.Bytes(), &obj))
	assert.Equal(t, v, obj.Loss)
	assert.Equal(t, 3e-21, obj.LR)
}

type failingWriter struct{ writes int }

func (f *failingWriter) Write(p []byte) (int, error) {
	f.writes++
	return 0, errors.New("disk full")
}

func TestJSONLinesKeepsFirstWriteError(t *testing.T) {
	w := &failingWriter{}
	j := NewJSONLines(w)
	j.Step(Record{Step: 7, Metrics: map[string]float64{MetricLoss: 1}})
	j.Step(Record{Step: 8, Metrics: map[string]float64{MetricLoss: 1}})
	err := j.Close()
	require.Error(t, err)
	assert.Contains(t, err.Error(), "disk full")
	assert.Contains(t, err.Error(), "step 7")
	assert.Equal(t, 1, w.writes, "no write after the first failure")
}
