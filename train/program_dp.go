package train

// Data-parallel gradient reduction as ops of the micro-batch step.
//
// With ProgramConfig.DataParallel (and GradSums), the step keeps each
// parameter's gradient sum as state, as one process does, and averages the
// sums across processes on the last micro-batch of a window, inside the
// same Run. The parameters are cut into buckets of at most BucketBytes,
// filled in reverse parameter order (PyTorch DDP's layout: our autodiff
// emits gradients from the loss backwards, so the last parameters' come
// first). For bucket k the pass adds
//
//	AccumulateGrad(fresh, S_i.., G_i..)       -> A_i..   right after the node that
//	AllReduceStart(sync, A_i..) bucket=k      -> F_i..   finishes the bucket's last gradient
//	AllReduceWait(sync, F_i..)  bucket=k      -> S'_i..  at the end of the step
//
// so the reduction of a bucket travels while the rest of backward runs.
// The sync input is true on the window's last micro-batch only; otherwise
// Start and Wait pass the sums through. The chain AccumulateGrad → Start →
// Wait updates each sum in place (the CPU backend's state chain), so the
// communicator reduces the state buffers themselves.
//
// The result is bit for bit the host path's it replaces (gradients summed
// over the window, then each bucket's concatenation averaged with one
// all-reduce), since every element sees the same additions in the same
// order.

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// DataParallelConfig configures the gradient reduction in the step.
type DataParallelConfig struct {
	// BucketBytes bounds one all-reduce (0: PyTorch DDP's 25 MB).
	BucketBytes int
	// Compress is "" or "bf16" (gradients as bfloat16 on the wire).
	Compress string
	// NoOverlap places every bucket's reduction after the backward pass.
	NoOverlap bool
}

// dpLayout is the program's bucket layout.
type dpLayout struct {
	buckets *gradBuckets
	// early counts the buckets whose reduction starts before the last
	// backward node.
	early int
}

// bucketsFor lays out gradient buckets of at most limit bytes (or one
// tensor when a tensor alone is larger) over tensors of the given sizes,
// filled in reverse order.
func bucketsFor(sizes []int, limit int) *gradBuckets {
	b := &gradBuckets{bucketOf: make([]int, len(sizes))}
	n := 0
	for i := len(sizes) - 1; i >= 0; i-- {
		size := sizes[i]
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
	return b
}

// addBucketedSums makes the gradient sums' state and the per-bucket
// accumulate, start and wait nodes. Nodes placed right after backward node
// j go to after[j]; it returns the nodes for the end of the graph (late
// buckets, then every wait) and the sums' state. last is the index of the
// last node of the graph before placement.
func (p *Program) addBucketedSums(g *graph.Graph, grads []string, producer map[string]int, after map[int][]*graph.Node, last int) ([]*graph.Node, []backend.StateSpec) {
	dp := p.cfg.DataParallel
	limit := dp.BucketBytes
	if limit <= 0 {
		limit = 25 << 20
	}
	sizes := make([]int, len(p.Params))
	for i, prm := range p.Params {
		sizes[i] = prm.Value.Size()
	}
	p.dp = &dpLayout{buckets: bucketsFor(sizes, limit)}
	scalarBool := &graph.Type{Kind: graph.KindTensor, DType: graph.Bool, HasShape: true, Shape: []graph.Dim{}}
	g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: freshInput, Type: scalarBool}, &graph.ValueInfo{Name: syncInput, Type: scalarBool})
	var state []backend.StateSpec
	p.gradSums = make([]*graph.Tensor, len(p.Params))
	for i, prm := range p.Params {
		sum := GradStateName(prm.Name)
		p.gradSums[i] = graph.Zeros(graph.Float32, prm.Value.Shape...)
		g.Inputs = append(g.Inputs, &graph.ValueInfo{Name: sum, Type: typeOf(prm.Value)})
		g.Outputs = append(g.Outputs, &graph.ValueInfo{Name: sum + "/new"})
		state = append(state, backend.StateSpec{Name: sum, Init: p.gradSums[i], UpdatedBy: sum + "/new"})
	}
	var late, waits []*graph.Node
	for k, members := range p.dp.buckets.members {
		tensors := graph.IntAttr("tensors", int64(len(members)))
		bucket := graph.IntAttr("bucket", int64(k))
		acc := &graph.Node{Name: fmt.Sprintf("onnxtrain/bucket%d/accumulate", k), OpType: graph.AccumulateGradOp, Domain: graph.InternalDomain,
			Inputs: []string{freshInput}, Attrs: map[string]*graph.Attr{"tensors": tensors}}
		start := &graph.Node{Name: fmt.Sprintf("onnxtrain/bucket%d/all_reduce_start", k), OpType: graph.AllReduceStartOp, Domain: graph.InternalDomain,
			Inputs: []string{syncInput}, Attrs: map[string]*graph.Attr{"tensors": tensors, "bucket": bucket,
				"reduction": graph.StringAttr("reduction", "mean"), "compress": graph.StringAttr("compress", dp.Compress)}}
		wait := &graph.Node{Name: fmt.Sprintf("onnxtrain/bucket%d/all_reduce_wait", k), OpType: graph.AllReduceWaitOp, Domain: graph.InternalDomain,
			Inputs: []string{syncInput}, Attrs: map[string]*graph.Attr{"tensors": tensors, "bucket": bucket}}
		pos, placed := -1, true
		for _, i := range members {
			sum := GradStateName(p.Params[i].Name)
			acc.Inputs = append(acc.Inputs, sum)
			acc.Outputs = append(acc.Outputs, sum+"/acc")
			start.Inputs = append(start.Inputs, sum+"/acc")
			start.Outputs = append(start.Outputs, sum+"/in_flight")
			wait.Inputs = append(wait.Inputs, sum+"/in_flight")
			wait.Outputs = append(wait.Outputs, sum+"/new")
			j, ok := producer[grads[i]]
			placed = placed && ok
			pos = max(pos, j)
		}
		for _, i := range members {
			acc.Inputs = append(acc.Inputs, p.scratch.gradNames[i])
		}
		if dp.NoOverlap || !placed {
			late = append(late, acc, start)
		} else {
			after[pos] = append(after[pos], acc, start)
			if pos < last {
				p.dp.early++
			}
		}
		waits = append(waits, wait)
	}
	return append(late, waits...), state
}

// SetSyncGradients says whether the next micro-batch of a DataParallel
// program ends its window: its gradient sums are then averaged across
// processes (through the communicator in the Run's context).
func (p *Program) SetSyncGradients(sync bool) { p.syncNext = sync }

// Buckets returns the parameter indices of each gradient bucket of a
// DataParallel program, in reduction order (nil otherwise).
func (p *Program) Buckets() [][]int {
	if p.dp == nil {
		return nil
	}
	return p.dp.buckets.members
}
