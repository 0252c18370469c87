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
	if k := n.AttrInt("tensors", int64(len(in)-1)); int(k) != len(in)-1 && n.OpType != graph.ReduceScatterOp {
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

func init() {
	kern.RegisterSpec(graph.InternalDomain, graph.ReduceScatterOp, kern.Spec{Fn: reduceScatter})
	kern.RegisterSpec(graph.InternalDomain, graph.AllGatherOp, kern.Spec{Fn: allGather})
}

// flatSpace is ZeRO's view of tensors laid end to end (graph/collective_ops.go).
type flatSpace struct {
	data              [][]float32
	offs              []int // offs[i]: first flat element of tensor i; offs[len] = Ψ
	total, part       int   // Ψ and P
	world, rank, size int   // size: elements per partition and round
}

func newFlatSpace(n *graph.Node, data [][]float32) (*flatSpace, error) {
	f := &flatSpace{data: data, offs: make([]int, len(data)+1)}
	for i, d := range data {
		f.offs[i+1] = f.offs[i] + len(d)
	}
	f.total = f.offs[len(data)]
	f.world, f.rank, f.size = int(n.AttrInt("world", 0)), int(n.AttrInt("rank", -1)), int(n.AttrInt("chunk", 0))
	if f.world < 1 || f.rank < 0 || f.rank >= f.world || f.size < 1 {
		return nil, n.Errorf("attributes world=%d, rank=%d, chunk=%d (want world ≥ 1, 0 ≤ rank < world, chunk ≥ 1)", f.world, f.rank, f.size)
	}
	f.part = (f.total + f.world - 1) / f.world
	return f, nil
}

// pieces calls fn for each tensor that flat elements [from, from+n) meet
// (clipped to Ψ): tensor i, its elements [lo, lo+cnt), which are elements
// [off, off+cnt) of the span.
func (f *flatSpace) pieces(from, n int, fn func(i, lo, off, cnt int)) {
	end := min(from+n, f.total)
	for i := 0; i < len(f.data) && from < end; i++ {
		s, e := max(from, f.offs[i]), min(end, f.offs[i+1])
		if s < e {
			fn(i, s-f.offs[i], s-from, e-s)
		}
	}
}

// read copies flat elements [from, from+len(dst)) into dst, zeros past Ψ.
func (f *flatSpace) read(from int, dst []float32) {
	if from+len(dst) > f.total {
		clear(dst)
	}
	f.pieces(from, len(dst), func(i, lo, off, cnt int) { copy(dst[off:off+cnt], f.data[i][lo:lo+cnt]) })
}

// write copies src into flat elements [from, from+len(src)) below Ψ.
func (f *flatSpace) write(from int, src []float32) {
	f.pieces(from, len(src), func(i, lo, off, cnt int) { copy(f.data[i][lo:lo+cnt], src[off:off+cnt]) })
}

// buffers returns the staging of one call: N·chunk elements for the
// message and chunk for this rank's block. They live for the call only, so
// that a ZeRO rank keeps no message-sized buffer from step to step.
func (f *flatSpace) buffers() (staging, mine []float32) {
	n := min(f.size, f.part)
	b := make([]float32, (f.world+1)*n)
	return b[:f.world*n], b[f.world*n:]
}

// reduceScatter is graph.ReduceScatterOp.
func reduceScatter(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if len(in) < 4 {
		return nil, n.Errorf("ReduceScatter takes sync, fresh, S and at least one tensor, has %d inputs", len(in))
	}
	flags := [2]bool{}
	for j, name := range []string{"sync", "fresh"} {
		if in[j] == nil || in[j].DType != graph.Bool || in[j].Size() != 1 || in[j].Validate() != nil {
			return nil, n.Errorf("input %d (%s) must be a bool scalar", j, name)
		}
		flags[j] = in[j].Data.([]bool)[0]
	}
	// The collective-op checks of S, the reduction and the options.
	c, err := prepareCollective(ctx, n, append([]*graph.Tensor{in[0]}, in[2]))
	if err != nil {
		return nil, err
	}
	out, part := c.outs[0], c.bufs[0]
	data := make([][]float32, len(in)-3)
	if k := n.AttrInt("tensors", int64(len(in)-3)); int(k) != len(in)-3 {
		return nil, n.Errorf("attribute tensors=%d but the node has %d tensors", k, len(in)-3)
	}
	for j, t := range in[3:] {
		if t == nil {
			return nil, n.Errorf("input %d (%q) is missing", j+3, n.Input(j+3))
		}
		d, ok := t.Data.([]float32)
		if !ok || t.DType != graph.Float32 || len(d) != t.Size() {
			return nil, n.Errorf("input %d (%q) must be float32", j+3, n.Input(j+3))
		}
		data[j] = d
	}
	f, err := newFlatSpace(n, data)
	if err != nil {
		return nil, err
	}
	if len(part) != f.part {
		return nil, n.Errorf("S has %d elements; a partition of %d elements over %d processes has %d", len(part), f.total, f.world, f.part)
	}
	if !flags[0] {
		return []*graph.Tensor{out}, nil
	}
	if c.comm != nil && c.comm.WorldSize() != f.world {
		return nil, n.Errorf("the node was built for %d processes, the communicator has %d", f.world, c.comm.WorldSize())
	}
	staging, _ := f.buffers()
	for off := 0; off < f.part; off += f.size {
		cnt := min(f.size, f.part-off)
		buf := staging[:f.world*cnt]
		for q := 0; q < f.world; q++ {
			f.read(q*f.part+off, buf[q*cnt:(q+1)*cnt])
		}
		mine := buf[f.rank*cnt : (f.rank+1)*cnt]
		if c.comm != nil && f.world > 1 {
			if mine, err = c.comm.ReduceScatter(ctx.Ctx, buf, c.op, c.opts); err != nil {
				return nil, n.Errorf("%w", err)
			}
		}
		dst := part[off : off+cnt]
		if flags[1] {
			copy(dst, mine)
			continue
		}
		for i, x := range mine {
			dst[i] += x
		}
	}
	return []*graph.Tensor{out}, nil
}

// allGather is graph.AllGatherOp.
func allGather(ctx *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	c, err := prepareCollective(ctx, n, in)
	if err != nil {
		return nil, err
	}
	f, err := newFlatSpace(n, c.bufs)
	if err != nil {
		return nil, err
	}
	if !c.sync || c.comm == nil || f.world == 1 {
		return c.outs, nil
	}
	if c.comm.WorldSize() != f.world {
		return nil, n.Errorf("the node was built for %d processes, the communicator has %d", f.world, c.comm.WorldSize())
	}
	staging, scratch := f.buffers()
	for off := 0; off < f.part; off += f.size {
		cnt := min(f.size, f.part-off)
		buf, mine := staging[:f.world*cnt], scratch[:cnt]
		f.read(f.rank*f.part+off, mine)
		if err := c.comm.AllGather(ctx.Ctx, mine, buf); err != nil {
			return nil, n.Errorf("%w", err)
		}
		for q := 0; q < f.world; q++ {
			if q != f.rank {
				f.write(q*f.part+off, buf[q*cnt:(q+1)*cnt])
			}
		}
	}
	return c.outs, nil
}
