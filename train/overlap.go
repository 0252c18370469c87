package train

// Overlapping the gradient all-reduce with the backward pass.
//
// Forward runs forward and backward as one executor Run. On the micro-batch
// that ends an accumulation window (and only with more than one process),
// the executor reports every gradient as soon as it is computed
// (backend.WithOutputFunc): the report adds it into the model's gradient
// buffer, and once every member of a bucket is final, a background
// goroutine all-reduces that bucket while the executor goes on with the
// rest of backward. Backward then adds the gradients that were not
// reported, waits for the goroutine and surfaces its error.
//
// The buckets are those of the non-overlapped path (allReduceGrads), in the
// same order: the goroutine issues bucket 0, then 1, ..., whatever order the
// gradients arrive in, so every rank issues the same collectives in the
// same order and the result is bit for bit that of reducing in Backward.
// The buckets are filled in reverse parameter order, as PyTorch DDP's are:
// our autodiff emits the gradients from the loss backwards, so the last
// parameters' gradients are final first (TestGradientsArriveInReverseOrder
// checks this on the fixtures).
//
// The goroutine is the only caller of the process group while it runs.
// When the step's context carries a collective (synchronised BatchNorm
// issues collectives from the executor during Forward), two callers would
// race for the group and could issue collectives in different orders on
// different ranks, so there is no overlap then: Backward reduces.

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/graph"
)

// gradBuckets are the all-reduce buckets of a model's gradients: indices
// into Model.grads, in the order they are reduced.
type gradBuckets struct {
	members  [][]int
	bucketOf []int // parameter index -> bucket
	elements []int // elements per bucket
}

// buckets returns the model's gradient buckets for a limit in bytes (at
// most limit bytes each, or one parameter when a parameter alone is
// larger), filled in reverse parameter order.
func (m *Model) buckets(limit int) *gradBuckets {
	if m.bucketLayout != nil && m.bucketLimit == limit {
		return m.bucketLayout
	}
	b := &gradBuckets{bucketOf: make([]int, len(m.params))}
	n := 0
	for i := len(m.params) - 1; i >= 0; i-- {
		size := m.params[i].Value.Size()
		k := len(b.members) - 1
		if k < 0 || (n > 0 && 4*(n+size) > limit) {
			b.members = append(b.members, nil)
			b.elements = append(b.elements, 0)
			k++
			n = 0
		}
		b.members[k] = append(b.members[k], i)
		b.elements[k] += size
		b.bucketOf[i] = k
		n += size
	}
	m.bucketLayout, m.bucketLimit = b, limit
	return b
}

// bucketLimit is BucketBytes, or PyTorch DDP's default of 25 MB.
func (a *Accelerator) bucketLimit() int {
	if a.cfg.BucketBytes > 0 {
		return a.cfg.BucketBytes
	}
	return 25 << 20
}

// reduceOptions are the options of a gradient collective.
func (a *Accelerator) reduceOptions() []distrib.Option {
	if a.cfg.CompressBF16 {
		return []distrib.Option{distrib.WithBF16()}
	}
	return nil
}

// allReduceBucket averages bucket k of the model's gradients across
// processes, through the staging buffer m.bucket.
func (a *Accelerator) allReduceBucket(ctx context.Context, m *Model, b *gradBuckets, k int) error {
	if cap(m.bucket) < b.elements[k] {
		m.bucket = make([]float32, 0, b.elements[k])
	}
	bucket := m.bucket[:0]
	for _, i := range b.members[k] {
		bucket = append(bucket, m.grads[i].Float32s()...)
	}
	if err := a.cfg.Group.AllReduce(ctx, bucket, distrib.Mean, a.reduceOptions()...); err != nil {
		return fmt.Errorf("accelerator: gradient all-reduce at step %d (bucket %d of %d): %w", a.step+1, k+1, len(b.members), err)
	}
	off := 0
	for _, i := range b.members[k] {
		off += copy(m.grads[i].Float32s(), bucket[off:])
	}
	return nil
}

// overlapRun is the reduction of one micro-batch's gradients while its
// backward pass runs.
type overlapRun struct {
	a       *Accelerator
	m       *Model
	b       *gradBuckets
	ctx     context.Context
	index   map[string]int // gradient output name -> parameter index
	added   []bool         // gradient added to the buffer by the report
	pending []int          // members of each bucket not yet final
	ready   []chan struct{}
	abort   chan struct{}
	once    sync.Once
	done    chan struct{}
	err     error
}

// withOverlap returns the context for the Run of one micro-batch: on the
// last micro-batch of a window, with more than one process and no
// collective in ctx, it starts the background reduction and makes the
// executor report gradients to it.
func (a *Accelerator) withOverlap(ctx context.Context, m *Model) context.Context {
	if m.overlap != nil {
		m.overlap.cancel() // a Forward whose gradients were never passed to Backward
		m.overlap = nil
	}
	if !a.sync || a.cfg.NoOverlap || a.NumProcesses() == 1 || backend.CollectiveFrom(ctx) != nil || a.zeroStage() > 0 {
		return ctx
	}
	b := m.buckets(a.bucketLimit())
	r := &overlapRun{
		a: a, m: m, b: b,
		ctx:     distrib.WithStep(context.Background(), int64(a.step+1)),
		index:   m.gradIndex(),
		added:   make([]bool, len(m.params)),
		pending: make([]int, len(b.members)),
		ready:   make([]chan struct{}, len(b.members)),
		abort:   make(chan struct{}),
		done:    make(chan struct{}),
	}
	for k := range b.members {
		r.pending[k] = len(b.members[k])
		r.ready[k] = make(chan struct{})
	}
	m.overlap = r
	go r.reduce()
	return backend.WithOutputFunc(ctx, r.report)
}

// finishOverlap is Backward for a micro-batch whose gradients were reduced
// while its backward pass ran.
func (a *Accelerator) finishOverlap(out *Output) error {
	m := a.models[0]
	r := m.overlap
	m.overlap = nil
	if len(out.grads) != len(m.grads) {
		r.cancel()
		return fmt.Errorf("accelerator: %d gradients for %d parameters", len(out.grads), len(m.grads))
	}
	err := r.finish(out.grads)
	m.fresh = false
	for i, p := range m.params {
		p.Grad = m.grads[i]
	}
	return err
}

// accumulateOne is accumulate for gradient i alone.
func accumulateOne(acc []*graph.Tensor, i int, g *graph.Tensor, first bool) {
	switch {
	case acc[i] == nil:
		acc[i] = g.Clone()
	case first:
		copy(acc[i].Float32s(), g.Float32s())
	default:
		a, s := acc[i].Float32s(), g.Float32s()
		for j := range a {
			a[j] += s[j]
		}
	}
}

// OverlapStats count the buckets of overlapped micro-batches: Early were
// complete (and handed to the all-reduce) before the backward pass ended.
type OverlapStats struct{ Buckets, Early int }

// OverlapStats reports how many gradient buckets were reduced while
// backward ran, over the run so far.
func (m *Model) OverlapStats() OverlapStats { return m.overlapStats }

// gradIndex maps the gradient outputs' names to parameter indices.
func (m *Model) gradIndex() map[string]int {
	if m.gradNames == nil {
		m.gradNames = make(map[string]int, len(m.params))
		for i, p := range m.params {
			m.gradNames[gradPrefix+p.Name] = i
		}
	}
	return m.gradNames
}

// report receives a graph output from the executor.
func (r *overlapRun) report(name string, t *graph.Tensor) {
	if !strings.HasPrefix(name, gradPrefix) {
		return
	}
	i, ok := r.index[name]
	if !ok || r.added[i] || !graph.SameShape(t.Shape, r.m.params[i].Value.Shape) || t.DType != graph.Float32 {
		return // Backward checks it and reports the problem
	}
	r.add(i, t)
}

// add adds gradient i into the model's buffer and, when that completes a
// bucket, hands the bucket to the goroutine.
func (r *overlapRun) add(i int, t *graph.Tensor) {
	accumulateOne(r.m.grads, i, t, r.m.fresh)
	r.added[i] = true
	k := r.b.bucketOf[i]
	r.pending[k]--
	if r.pending[k] == 0 {
		close(r.ready[k])
	}
}

// reduce all-reduces the buckets in order as they become ready.
func (r *overlapRun) reduce() {
	defer close(r.done)
	for k := range r.b.members {
		select {
		case <-r.ready[k]:
		case <-r.abort:
			return
		}
		if err := r.a.allReduceBucket(r.ctx, r.m, r.b, k); err != nil {
			r.err = err
			return
		}
	}
}

// finish adds the gradients the executor did not report, waits for the
// reduction and returns its error.
func (r *overlapRun) finish(grads []*graph.Tensor) error {
	for k := range r.ready {
		if r.pending[k] == 0 {
			r.m.overlapStats.Early++
		}
	}
	r.m.overlapStats.Buckets += len(r.ready)
	for i, g := range grads {
		if !r.added[i] {
			r.add(i, g)
		}
	}
	<-r.done
	return r.err
}

// cancel stops the goroutine of a micro-batch whose Run failed (the buckets
// not yet started are dropped).
func (r *overlapRun) cancel() {
	r.once.Do(func() { close(r.abort) })
	<-r.done
}
