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
