package track

import (
	"errors"
	"time"
)

// Names of the metrics the trainer reports. A Record may carry any other name too: the
// JSON-lines, TensorBoard and Prometheus trackers pass unknown names through.
const (
	MetricLoss        = "loss"          // mean training loss of the step
	MetricLR          = "lr"            // learning rate used by the step
	MetricGradNorm    = "grad_norm"     // total L2 norm of the gradients, before clipping
	MetricSamplesPerS = "samples_per_s" // throughput of the step
	MetricSamples     = "samples"       // samples consumed by the step
	MetricValLoss     = "val_loss"      // mean validation loss
	MetricValAccuracy = "val_accuracy"  // validation accuracy in [0, 1]
	MetricValSamples  = "val_samples"   // samples in the validation pass
)

// Record is what a tracker receives: the optimizer step it belongs to (counted from 1), the
// epoch (counted from 0) and named metrics. Time is when the record was made; the zero
// value means "now". Trackers do not keep the Metrics map after the call returns.
type Record struct {
	Step    int
	Epoch   int
	Time    time.Time
	Metrics map[string]float64
}

// Tracker receives training records.
type Tracker interface {
	// Step reports one optimizer step.
	Step(r Record)
	// Eval reports one validation pass.
	Eval(r Record)
	// Close flushes and releases what the tracker holds and returns the first error it met.
	Close() error
}

// Value returns the metric named name and whether the record has it.
func (r Record) Value(name string) (float64, bool) {
	v, ok := r.Metrics[name]
	return v, ok
}

func (r Record) time() time.Time {
	if r.Time.IsZero() {
		return time.Now()
	}
	return r.Time
}

// Nop returns a tracker that does nothing.
func Nop() Tracker { return nop{} }

type nop struct{}

func (nop) Step(Record)  {}
func (nop) Eval(Record)  {}
func (nop) Close() error { return nil }

// Multi returns a tracker that hands every record to each of trackers, in order. Nil
// trackers are skipped. Close closes all of them and joins their errors.
func Multi(trackers ...Tracker) Tracker {
	var list multi
	for _, t := range trackers {
		if t != nil {
			list = append(list, t)
		}
	}
	switch len(list) {
	case 0:
		return nop{}
	case 1:
		return list[0]
	}
	return list
}

type multi []Tracker

func (m multi) Step(r Record) {
	for _, t := range m {
		t.Step(r)
	}
}

func (m multi) Eval(r Record) {
	for _, t := range m {
		t.Eval(r)
	}
}

func (m multi) Close() error {
	var errs []error
	for _, t := range m {
		if err := t.Close(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
