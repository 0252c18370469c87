package training

import (
	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// The multi-tensor collective ops (graph/collective_ops.go). The CPU passes
// its buffers to the communicator: with kern.Context.InPlace the operands
// are the program's state buffers (the gradient sums) and the reduction is
// made in them; otherwise the kernel reduces copies.
func init() {
	kern.RegisterSpec(graph.InternalDomain, graph.AllReduceOp, kern.Spec{Fn: allReduce})
	kern.RegisterSpec(graph.InternalDomain, graph.AllReduceStartOp, kern.Spec{Fn: allReduceStart})
	kern.RegisterSpec(graph.InternalDomain, graph.AllReduceWaitOp, kern.Spec{Fn: allReduceWait})
}

// collectiveCall is a collective node's operands: its sync flag, outputs
// (the inputs themselves in place, copies otherwise) and their data.
type collectiveCall struct {
	sync bool
	outs []*graph.Tensor
	bufs [][]float32
	op   backend.ReduceOp
	opts backend.CommOptions
	comm backend.Communicator
}

// prepareCollective checks a collective node's inputs and makes its outputs.
func prepareCollective(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) (*collectiveCall, error) {
	if len(in) < 2 {
		return nil, n.Errorf("%s needs the sync flag and at least one tensor, has %d inputs", n.OpType, len(in))
	}
	if k := n.AttrInt("tensors", int64(len(in)-1)); int(k) != len(in)-1 {
		return nil, n.Errorf("attribute tensors=%d but the node has %d tensors", k, len(in)-1)
	}
	if in[0] == nil || in[0].DType != graph.Bool || in[0].Size() != 1 || in[0].Validate() != nil {
		return nil, n.Errorf("input 0 (sync) must be a bool scalar")
	}
	c := &collectiveCall{sync: in[0].Data.([]bool)[0]}
	switch r := n.AttrString("reduction", "mean"); r {
	case "mean":
		c.op = backend.ReduceMean
	case "sum":
		c.op = backend.ReduceSum
	default:
		return nil, n.Errorf("reduction %q (want sum or mean)", r)
	}
	switch s := n.AttrString("compress", ""); s {
	case "", "bf16":
		c.opts.Compress = s
	default:
		return nil, n.Errorf("compress %q (want \"\" or bf16)", s)
	}
	inPlace := ctx != nil && ctx.InPlace
	c.outs = make([]*graph.Tensor, len(in)-1)
	c.bufs = make([][]float32, len(in)-1)
	for j, t := range in[1:] {
		if t == nil {
			return nil, n.Errorf("input %d (%q) is missing", j+1, n.Input(j+1))
		}
		d, ok := t.Data.([]float32)
		if !ok || t.DType != graph.Float32 || len(d) != t.Size() {
			return nil, n.Errorf("input %d (%q) is %v; %s reduces float32 tensors", j+1, n.Input(j+1), t.DType, n.OpType)
		}
		if inPlace {
			c.outs[j], c.bufs[j] = t, d
			continue
		}
		o, err := kern.NewUninit(n, graph.Float32, t.Shape)
		if err != nil {
			return nil, err
		}
		copy(o.Float32s(), d)
		c.outs[j], c.bufs[j] = o, o.Float32s()
	}
	if ctx != nil && ctx.Ctx != nil {
		c.comm = backend.CommunicatorFrom(ctx.Ctx)
	}
	return c, nil
}

// active reports whether the node exchanges anything this Run.
func (c *collectiveCall) active() bool {
	return c.sync && c.comm != nil && c.comm.WorldSize() > 1
}

// allReduce is graph.AllReduceOp.
func allReduce(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	c, err := prepareCollective(ctx, n, in)
	if err != nil {
		return nil, err
	}
	if c.active() {
		if err := c.comm.AllReduce(ctx.Ctx, c.bufs, c.op, c.opts); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	return c.outs, nil
}

// allReduceStart is graph.AllReduceStartOp: the communicator reduces the
// outputs' buffers while the nodes after this one run.
func allReduceStart(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	c, err := prepareCollective(ctx, n, in)
	if err != nil {
		return nil, err
	}
	if c.active() {
		if err := c.comm.StartAllReduce(ctx.Ctx, int(n.AttrInt("bucket", 0)), c.bufs, c.op, c.opts); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	return c.outs, nil
}

// allReduceWait is graph.AllReduceWaitOp. Out of place, it waits before
// copying: the in-flight buffers are final only then.
func allReduceWait(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) < 2 {
		return nil, n.Errorf("%s needs the sync flag and at least one tensor, has %d inputs", n.OpType, len(in))
	}
	if in[0] == nil || in[0].DType != graph.Bool || in[0].Size() != 1 || in[0].Validate() != nil {
		return nil, n.Errorf("input 0 (sync) must be a bool scalar")
	}
	var comm backend.Communicator
	if ctx != nil && ctx.Ctx != nil {
		comm = backend.CommunicatorFrom(ctx.Ctx)
	}
	if in[0].Data.([]bool)[0] && comm != nil && comm.WorldSize() > 1 {
		if err := comm.Wait(ctx.Ctx, int(n.AttrInt("bucket", 0))); err != nil {
			return nil, n.Errorf("%w", err)
		}
	}
	// The reduced values are in the inputs now; in place they are the
	// outputs, otherwise copied (prepareCollective checks the operands).
	c, err := prepareCollective(ctx, n, in)
	if err != nil {
		return nil, err
	}
	return c.outs, nil
}
