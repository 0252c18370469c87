package track

import (
	"io"
	"math"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func scrape(t *testing.T, addr string) string {
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get("http://" + addr + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return string(body)
}

// sample returns the value of the sample line "name value" in a text exposition.
func sample(t *testing.T, exposition, name string) string {
	for _, line := range strings.Split(exposition, "\n") {
		if v, ok := strings.CutPrefix(line, name+" "); ok {
			return v
		}
	}
	t.Fatalf("no sample %s in:\n%s", name, exposition)
	return ""
}

func TestPrometheusServesMetrics(t *testing.T) {
	tr, err := NewPrometheus("127.0.0.1:0")
	require.NoError(t, err)
	p, ok := tr.(*Prometheus)
	require.True(t, ok)
	addr := p.Addr()
	assert.True(t, strings.HasPrefix(addr, "127.0.0.1:"), addr)

	p.Step(Record{Step: 1, Epoch: 0, Metrics: map[string]float64{
		MetricLoss: 2.5, MetricLR: 0.001, MetricGradNorm: 4, MetricSamplesPerS: 100, MetricSamples: 32,
	}})
	p.Step(Record{Step: 2, Epoch: 1, Metrics: map[string]float64{
		MetricLoss: 1.25, MetricLR: 0.0005, MetricGradNorm: 3, MetricSamplesPerS: 120, MetricSamples: 16,
		"loss_scale": 65536,
	}})
	p.Eval(Record{Step: 2, Epoch: 1, Metrics: map[string]float64{MetricValLoss: 0.5, MetricValAccuracy: 0.875}})

	body := scrape(t, addr)
	assert.Equal(t, "2", sample(t, body, "onnxtrain_step"))
	assert.Equal(t, "1", sample(t, body, "onnxtrain_epoch"))
	assert.Equal(t, "1.25", sample(t, body, "onnxtrain_loss"))
	assert.Equal(t, "0.0005", sample(t, body, "onnxtrain_lr"))
	assert.Equal(t, "3", sample(t, body, "onnxtrain_grad_norm"))
	assert.Equal(t, "120", sample(t, body, "onnxtrain_samples_per_second"))
	assert.Equal(t, "48", sample(t, body, "onnxtrain_samples_total"))
	assert.Equal(t, "0.5", sample(t, body, "onnxtrain_val_loss"))
	assert.Equal(t, "0.875", sample(t, body, "onnxtrain_val_accuracy"))
	assert.Equal(t, "65536", sample(t, body, `onnxtrain_metric{name="loss_scale"}`))
	assert.Contains(t, body, "# TYPE onnxtrain_samples_total counter")
	assert.Contains(t, body, "# TYPE onnxtrain_loss gauge")
	assert.Contains(t, body, "go_goroutines", "the Go runtime's metrics are served too")

	// A diverged run: the loss gauge says NaN, the counter ignores nonsense.
	p.Step(Record{Step: 3, Metrics: map[string]float64{MetricLoss: math.NaN(), MetricSamples: -5}})
	body = scrape(t, addr)
	assert.Equal(t, "NaN", sample(t, body, "onnxtrain_loss"))
	assert.Equal(t, "48", sample(t, body, "onnxtrain_samples_total"))

	require.NoError(t, p.Close())
	_, err = net.DialTimeout("tcp", addr, time.Second)
	assert.Error(t, err, "the server stops on Close")
	require.NoError(t, p.Close(), "a second Close is harmless")
	p.Step(Record{Step: 4}) // ignored after Close
}

func TestPrometheusAddressInUse(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, err = NewPrometheus(ln.Addr().String())
	require.Error(t, err)
	assert.Contains(t, err.Error(), ln.Addr().String())

	_, err = NewPrometheus("not an address")
	assert.Error(t, err)
}

func TestPrometheusTwoTrackersDoNotCollide(t *testing.T) {
	// Each tracker has a registry of its own: two in one process both work.
	a, err := ServePrometheus("127.0.0.1:0")
	require.NoError(t, err)
	defer a.Close()
	b, err := ServePrometheus("127.0.0.1:0")
	require.NoError(t, err)
	defer b.Close()
	a.Step(Record{Step: 5, Metrics: map[string]float64{MetricLoss: 1}})
	b.Step(Record{Step: 9, Metrics: map[string]float64{MetricLoss: 2}})
	assert.Equal(t, "5", sample(t, scrape(t, a.Addr()), "onnxtrain_step"))
	assert.Equal(t, "9", sample(t, scrape(t, b.Addr()), "onnxtrain_step"))
}
