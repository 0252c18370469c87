package track

import (
	"context"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// prometheusShutdownTimeout bounds how long Close waits for scrapes in flight.
const prometheusShutdownTimeout = 5 * time.Second

// Prometheus serves training metrics on /metrics. Its methods are the Tracker's, plus Addr
// and Handler.
type Prometheus struct {
	registry *prometheus.Registry
	gauges   map[string]prometheus.Gauge // by metric name
	epoch    prometheus.Gauge
	step     prometheus.Gauge
	samples  prometheus.Counter
	other    *prometheus.GaugeVec

	ln     net.Listener
	server *http.Server
	served chan error

	mu     sync.Mutex
	closed bool
	err    error
}

// NewPrometheus listens on addr (host:port; port 0 picks a free one) and serves the metrics
// on http://addr/metrics until Close, in the Prometheus text format:
//
//	onnxtrain_step, onnxtrain_epoch                    the last step's step and epoch
//	onnxtrain_loss, onnxtrain_lr, onnxtrain_grad_norm  the last step's metrics
//	onnxtrain_samples_per_second                       the last step's throughput
//	onnxtrain_samples_total                            samples trained on (a counter)
//	onnxtrain_val_loss, onnxtrain_val_accuracy         the last validation pass
//	onnxtrain_metric{name="..."}                       any other metric, last value
//
// plus the Go runtime's and the process's standard metrics. The returned tracker is a
// *Prometheus: its Addr tells the address in use.
func NewPrometheus(addr string) (Tracker, error) {
	p, err := ServePrometheus(addr)
	if err != nil {
		return nil, err
	}
	return p, nil
}

// ServePrometheus is NewPrometheus returning the concrete type.
func ServePrometheus(addr string) (*Prometheus, error) {
	p := newPrometheusMetrics()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("track: Prometheus metrics address %q: %w", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", p.Handler())
	p.ln = ln
	p.server = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	p.served = make(chan error, 1)
	go func() { p.served <- p.server.Serve(ln) }()
	return p, nil
}

func newPrometheusMetrics() *Prometheus {
	gauge := func(name, help string) prometheus.Gauge {
		return prometheus.NewGauge(prometheus.GaugeOpts{Name: name, Help: help})
	}
	p := &Prometheus{
		registry: prometheus.NewRegistry(),
		step:     gauge("onnxtrain_step", "Optimizer steps taken."),
		epoch:    gauge("onnxtrain_epoch", "Epoch of the last optimizer step, from 0."),
		gauges: map[string]prometheus.Gauge{
			MetricLoss:        gauge("onnxtrain_loss", "Mean training loss of the last optimizer step."),
			MetricLR:          gauge("onnxtrain_lr", "Learning rate of the last optimizer step."),
			MetricGradNorm:    gauge("onnxtrain_grad_norm", "Total L2 norm of the gradients of the last optimizer step, before clipping."),
			MetricSamplesPerS: gauge("onnxtrain_samples_per_second", "Training throughput of the last optimizer step."),
			MetricValLoss:     gauge("onnxtrain_val_loss", "Mean loss of the last validation pass."),
			MetricValAccuracy: gauge("onnxtrain_val_accuracy", "Accuracy of the last validation pass, from 0 to 1."),
		},
		samples: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "onnxtrain_samples_total", Help: "Training samples consumed.",
		}),
		other: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "onnxtrain_metric", Help: "Last value of a training metric without a metric of its own.",
		}, []string{"name"}),
	}
	p.registry.MustRegister(p.step, p.epoch, p.samples, p.other,
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	for _, g := range p.gauges {
		p.registry.MustRegister(g)
	}
	return p
}

// Addr returns the address the server listens on, such as 127.0.0.1:9090.
func (p *Prometheus) Addr() string { return p.ln.Addr().String() }

// Handler returns the /metrics handler, to mount on a server of one's own.
func (p *Prometheus) Handler() http.Handler {
	return promhttp.HandlerFor(p.registry, promhttp.HandlerOpts{})
}

// Step sets the step, epoch and training gauges and adds the step's samples to the counter.
func (p *Prometheus) Step(r Record) {
	if p.isClosed() {
		return
	}
	p.step.Set(float64(r.Step))
	p.epoch.Set(float64(r.Epoch))
	p.set(r.Metrics)
}

// Eval sets the validation gauges.
func (p *Prometheus) Eval(r Record) {
	if p.isClosed() {
		return
	}
	p.set(r.Metrics)
}

func (p *Prometheus) set(metrics map[string]float64) {
	for name, v := range metrics {
		if g, ok := p.gauges[name]; ok {
			g.Set(v)
			continue
		}
		if name == MetricSamples {
			// A counter only grows: a negative or non-finite count is a caller's mistake
			// and is left out rather than corrupting the total.
			if v > 0 && !math.IsInf(v, 0) {
				p.samples.Add(v)
			}
			continue
		}
		p.other.WithLabelValues(name).Set(v)
	}
}

func (p *Prometheus) isClosed() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.closed
}

// Close stops the server, waiting up to five seconds for scrapes in flight.
func (p *Prometheus) Close() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return p.err
	}
	p.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), prometheusShutdownTimeout)
	defer cancel()
	if err := p.server.Shutdown(ctx); err != nil {
		p.err = fmt.Errorf("track: stopping Prometheus server on %s: %w", p.Addr(), err)
		p.server.Close()
	}
	if err := <-p.served; err != nil && !errors.Is(err, http.ErrServerClosed) && p.err == nil {
		p.err = fmt.Errorf("track: Prometheus server on %s: %w", p.Addr(), err)
	}
	return p.err
}
