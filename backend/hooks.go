package backend

import (
	"context"
	"time"

	"github.com/onnxtrain/onnxtrain/graph"
)

// OutputFunc receives a graph output as soon as the executable has computed
// it, before the rest of the graph has run (the training loop uses it to
// start reducing finished gradients while backward goes on). The tensor is
// the one Run will return: it stays valid until the next Run, and the
// function must not change it. It is called on the goroutine that runs the
// graph, so it should return quickly.
type OutputFunc func(name string, t *graph.Tensor)

type outputFuncKey struct{}

// WithOutputFunc returns a context that makes Run report outputs to f, on
// executables that support it (the CPU backend does); others ignore it and
// the caller sees the outputs when Run returns.
func WithOutputFunc(ctx context.Context, f OutputFunc) context.Context {
	return context.WithValue(ctx, outputFuncKey{}, f)
}

// OutputFuncFrom returns the function set by WithOutputFunc, or nil.
func OutputFuncFrom(ctx context.Context) OutputFunc {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(outputFuncKey{}).(OutputFunc)
	return f
}

// Collective is what kernels that reduce across processes use
// (synchronised BatchNorm statistics). A data-parallel training loop puts
// its process group's collective in the context it passes to Run.
type Collective interface {
	// AllReduceSum replaces x, on every process, by the element-wise sum
	// of x over all processes.
	AllReduceSum(ctx context.Context, x []float32) error
	// WorldSize is the number of processes.
	WorldSize() int
}

type collectiveKey struct{}

// WithCollective returns a context carrying c for the kernels of a Run.
func WithCollective(ctx context.Context, c Collective) context.Context {
	return context.WithValue(ctx, collectiveKey{}, c)
}

// CollectiveFrom returns the collective set by WithCollective, or else the
// communicator set by WithCommunicator, or nil (one process).
func CollectiveFrom(ctx context.Context) Collective {
	if ctx == nil {
		return nil
	}
	if c, ok := ctx.Value(collectiveKey{}).(Collective); ok {
		return c
	}
	if c := CommunicatorFrom(ctx); c != nil { // comm.go
		return c
	}
	return nil
}

// NodeTimer receives, for every node an executable runs, the wall time its
// kernel took (inputs gathered, outputs stored: the kernel call alone). It
// is called on the goroutine that runs the graph, after the kernel returns.
type NodeTimer func(n *graph.Node, d time.Duration)

type nodeTimerKey struct{}

// WithNodeTimer returns a context that makes Run time each node's kernel and
// report it to f, on executables that support it (the CPU backend does). It
// is meant for profiling ('onnxtrain bench --op-profile'): each call reads
// the clock twice.
func WithNodeTimer(ctx context.Context, f NodeTimer) context.Context {
	return context.WithValue(ctx, nodeTimerKey{}, f)
}

// NodeTimerFrom returns the function set by WithNodeTimer, or nil.
func NodeTimerFrom(ctx context.Context) NodeTimer {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(nodeTimerKey{}).(NodeTimer)
	return f
}

// NodeCallTimer is a NodeTimer that also sees the tensors of the call: the
// kernel's inputs (nil for an absent optional input) and outputs, valid only
// during the call (an executable may reuse their storage afterwards). It
// lets a profiler count each call's work: floating-point operations of a
// product, bytes a memory-bound op moves.
type NodeCallTimer func(n *graph.Node, in, out []*graph.Tensor, d time.Duration)

type nodeCallTimerKey struct{}

// WithNodeCallTimer is WithNodeTimer for a NodeCallTimer. An executable
// that supports both reports to both when both are set.
func WithNodeCallTimer(ctx context.Context, f NodeCallTimer) context.Context {
	return context.WithValue(ctx, nodeCallTimerKey{}, f)
}

// NodeCallTimerFrom returns the function set by WithNodeCallTimer, or nil.
func NodeCallTimerFrom(ctx context.Context) NodeCallTimer {
	if ctx == nil {
		return nil
	}
	f, _ := ctx.Value(nodeCallTimerKey{}).(NodeCallTimer)
	return f
}
