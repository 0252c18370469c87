package kern

import (
	"sync"
	"sync/atomic"
	"weak"

	"github.com/onnxtrain/onnxtrain/graph"
)

// Allocator serves the tensors a kernel allocates with New for one node:
// the executor's memory plan binds one to each node it runs, so kernels
// keep calling New and get storage the plan reuses between values whose
// lifetimes do not overlap.
type Allocator interface {
	// Alloc returns a zeroed tensor of dtype d, the given shape (copied)
	// and elems elements (the product of shape, already checked), or nil to
	// let New allocate from the heap. The tensor and its storage belong to
	// the Allocator, which hands them out again on the executor's next run.
	Alloc(n *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor
}

// UninitAllocator is an Allocator that can also serve storage without
// zeroing it, for kernels that write every element of their output
// (NewUninit). An Allocator without it zeroes every tensor.
type UninitAllocator interface {
	// AllocUninit is Alloc without the zeroing: the tensor's elements
	// hold whatever the storage last held.
	AllocUninit(n *graph.Node, d graph.DType, shape []int, elems int) *graph.Tensor
}

// Binding holds the Allocator bound to a node. The binding is weak: New
// uses it only while the Binding itself is reachable from its owner, so an
// executor that is garbage collected releases its storage without an
// explicit close.
type Binding struct {
	Allocator Allocator
	scratch   nodeScratch
}

// Begin starts a run of the bound node: the executor calls it before the
// node's kernel, so that View hands out the node's headers from the first
// again.
func (b *Binding) Begin() { b.scratch.nviews = 0 }

// Forget drops the references the node's reused result slice and view
// headers hold to its last run's tensors (the executor calls it after a
// run whose tensors came from the heap, so that they can be collected).
// The headers themselves are left to whoever still holds them (a run's
// outputs stay valid until the next run): the node takes new ones.
func (b *Binding) Forget() {
	s := &b.scratch
	clear(s.results[:cap(s.results)])
	s.results = s.results[:0]
	s.views, s.shapes, s.nviews = nil, nil, 0
}

var (
	// boundNodes counts the live entries of bindings, so that New skips
	// the map lookup entirely when no executor plans memory.
	boundNodes atomic.Int64
	bindings   sync.Map // *graph.Node -> weak.Pointer[Binding]
)

// Bind makes New serve n's allocations from b.Allocator while b is
// reachable. n must be a node only the binder runs (executors bind their own
// copies of the graph's nodes); a second Bind replaces the first.
func Bind(n *graph.Node, b *Binding) {
	if _, loaded := bindings.Swap(n, weak.Make(b)); !loaded {
		boundNodes.Add(1)
	}
}

// Unbind removes n's binding, if any.
func Unbind(n *graph.Node) {
	if _, loaded := bindings.LoadAndDelete(n); loaded {
		boundNodes.Add(-1)
	}
}

// Bound reports how many nodes have a binding (for tests of the executor's
// clean-up).
func Bound() int64 { return boundNodes.Load() }

// boundAlloc asks n's Allocator, if it has a live one, for a tensor
// (zeroed unless uninit is set and the Allocator is an UninitAllocator).
func boundAlloc(n *graph.Node, d graph.DType, shape []int, uninit bool) *graph.Tensor {
	v, ok := bindings.Load(n)
	if !ok {
		return nil
	}
	b := v.(weak.Pointer[Binding]).Value()
	if b == nil || b.Allocator == nil {
		return nil
	}
	elems, err := graph.NumElements(shape)
	if err != nil {
		return nil // New reports the error
	}
	if uninit {
		if u, ok := b.Allocator.(UninitAllocator); ok {
			return u.AllocUninit(n, d, shape, elems)
		}
	}
	return b.Allocator.Alloc(n, d, shape, elems)
}

// binding returns n's live Binding, or nil.
func binding(n *graph.Node) *Binding {
	if boundNodes.Load() == 0 {
		return nil
	}
	v, ok := bindings.Load(n)
	if !ok {
		return nil
	}
	return v.(weak.Pointer[Binding]).Value()
}

// nodeScratch is what a bound node keeps between runs besides its
// storage: the kernel's result slice, tensor headers for views of its
// inputs, and the kernel's own state.
type nodeScratch struct {
	results []*graph.Tensor
	views   []graph.Tensor
	shapes  [][]int
	nviews  int
	state   []any // one per type
}

// Results returns ts as a kernel's result slice. For a node bound by the
// executor the slice is the node's own, reused on every run (the executor
// copies the results out before the node runs again); otherwise it is a
// new slice.
func Results(n *graph.Node, ts ...*graph.Tensor) []*graph.Tensor {
	b := binding(n)
	if b == nil {
		return append([]*graph.Tensor(nil), ts...)
	}
	s := &b.scratch
	s.results = append(s.results[:0], ts...)
	return s.results
}

// View returns a tensor that shares t's data with the given shape (copied;
// its product must be t's size, which View does not check). For a node
// bound by the executor the header is the node's own, reused on the node's
// next run, like the storage kern.New serves; otherwise it is new.
func View(n *graph.Node, t *graph.Tensor, shape []int) *graph.Tensor {
	b := binding(n)
	if b == nil {
		return Reshape(t, shape)
	}
	s := &b.scratch
	k := s.nviews
	if k == len(s.views) {
		// Grow without moving the headers handed out before: earlier
		// views of this run keep their own.
		if k > 0 {
			return Reshape(t, shape)
		}
		s.views = make([]graph.Tensor, 4)
		s.shapes = make([][]int, 4)
	}
	s.nviews++
	v := &s.views[k]
	s.shapes[k] = append(s.shapes[k][:0], shape...)
	*v = graph.Tensor{DType: t.DType, Shape: s.shapes[k], Data: t.Data}
	return v
}

// State returns the per-node state of type T that a kernel keeps between
// runs of a node bound by the executor (plans, scratch buffers, Chunkers),
// allocating it on first use; for an unbound node it is a new zero T every
// call. A kernel must not assume the state came from a run with the same
// input shapes, and must not keep it past the kernel call for any
// goroutine but its own chunks.
func State[T any](n *graph.Node) *T {
	b := binding(n)
	if b == nil {
		return new(T)
	}
	for _, v := range b.scratch.state {
		if st, ok := v.(*T); ok {
			return st
		}
	}
	// A kernel that runs another kernel for the same node (a fused op's
	// fallback) keeps a state of each type.
	st := new(T)
	b.scratch.state = append(b.scratch.state, st)
	return st
}
