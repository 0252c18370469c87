package cuda

import (
	"slices"

	"github.com/onnxtrain/onnxtrain/graph"
)

// rowsAround moves axis to the end of x when it is not (a transposed copy
// into scratch) and returns the [rows, cols] view and the permutation to
// undo (nil when none was needed).
func (pl *planner) rowsAround(x *Buffer, axis int, coerce bool) (src *Buffer, rows, cols int64, perm []int) {
	r := len(x.Shape)
	if coerce || axis == r-1 || r == 0 {
		rows, cols, _ = split3(x.Shape, axis, r)
		if r == 0 {
			rows, cols = 1, 1
		}
		return x, rows, cols, nil
	}
	for d := range r {
		if d != axis {
			perm = append(perm, d)
		}
	}
	perm = append(perm, axis)
	ix, shape := permuted(x.Shape, perm)
	t := pl.scratch(x.DType, shape...)
	pl.copyView(x, t, ix)
	rows, cols, _ = split3(shape, r-1, r)
	return t, rows, cols, perm
}

// unpermute copies a row result back to dst's layout.
func (pl *planner) unpermute(src, dst *Buffer, perm []int) {
	inv := make([]int, len(perm))
	for i, p := range perm {
		inv[p] = i
	}
	shape := make([]int, len(perm))
	for d, p := range perm {
		shape[d] = dst.Shape[p]
	}
	ix, _ := permuted(shape, inv)
	pl.copyView(src, dst, ix)
}

func (pl *planner) softmax(n *graph.Node, logMode bool) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	def := int64(-1)
	if pl.opset < 13 {
		def = 1
	}
	ax, err := normAxis(n.AttrInt("axis", def), len(x.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	if x.DType != graph.Float32 {
		return n.Errorf("%s on %v: float32 only", n.OpType, x.DType)
	}
	src, rows, cols, perm := pl.rowsAround(x, ax, pl.opset < 13)
	dst := o
	if perm != nil {
		dst = pl.scratch(graph.Float32, src.Shape...)
	}
	pl.launchRows("softmax_f32", rows, Ptr(src), Ptr(dst), I64(rows), I64(cols), I32(boolInt(logMode)))
	if perm != nil {
		pl.unpermute(dst, o, perm)
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// softmaxGrad is onnxtrain's SoftmaxGrad/LogSoftmaxGrad (dy, y; axis,
// coerce), graph/lowerings_grad.go's semantics.
func (pl *planner) softmaxGrad(n *graph.Node, logMode bool) error {
	dy, err := pl.in(0)
	if err != nil {
		return err
	}
	y, err := pl.in(1)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	ax, err := normAxis(n.AttrInt("axis", -1), len(y.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	coerce := n.AttrInt("coerce", 0) != 0
	ys, rows, cols, perm := pl.rowsAround(y, ax, coerce)
	dys, _, _, _ := pl.rowsAround(dy, ax, coerce)
	dst := o
	if perm != nil {
		dst = pl.scratch(graph.Float32, ys.Shape...)
	}
	pl.launchRows("softmax_grad_f32", rows, Ptr(ys), Ptr(dys), Ptr(dst), I64(rows), I64(cols), I32(boolInt(logMode)))
	if perm != nil {
		pl.unpermute(dst, o, perm)
	}
	return nil
}

func (pl *planner) layerNorm(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	scale, err := pl.in(1)
	if err != nil {
		return err
	}
	bias, err := pl.in(2)
	if err != nil {
		return err
	}
	y, err := pl.out(0)
	if err != nil {
		return err
	}
	mean, err := pl.out(1)
	if err != nil {
		return err
	}
	inv, err := pl.out(2)
	if err != nil {
		return err
	}
	ax, err := normAxis(n.AttrInt("axis", -1), len(x.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	rows, cols, _ := split3(x.Shape, ax, len(x.Shape))
	if scale.Elements() != cols || (bias != nil && bias.Elements() != cols) {
		return n.Errorf("scale %v (and bias) must hold the %d normalised elements", scale.Shape, cols)
	}
	opt := func(b *Buffer) Arg {
		if b == nil {
			return Arg{Kind: ArgPtr}
		}
		return Ptr(b)
	}
	pl.launchRows("layernorm_f32", rows, Ptr(x), Ptr(scale), opt(bias), Ptr(y), opt(mean), opt(inv),
		I64(rows), I64(cols), F32(n.AttrFloat("epsilon", 1e-5)))
	return nil
}

// batchNorm plans training-mode BatchNormalization (training_mode=1):
// the running statistics' outputs start as copies of the inputs and the
// kernel updates them.
func (pl *planner) batchNorm(n *graph.Node) error {
	var ins [5]*Buffer
	for i := range ins {
		b, err := pl.in(i)
		if err != nil {
			return err
		}
		ins[i] = b
	}
	x := ins[0]
	y, err := pl.out(0)
	if err != nil {
		return err
	}
	rm, err := pl.out(1)
	if err != nil {
		return err
	}
	rv, err := pl.out(2)
	if err != nil {
		return err
	}
	if len(x.Shape) < 2 {
		return n.Errorf("BatchNormalization of rank %d", len(x.Shape))
	}
	N, C := int64(x.Shape[0]), int64(x.Shape[1])
	_, _, hw := split3(x.Shape, 0, 2)
	opt := func(b *Buffer) Arg {
		if b == nil {
			return Arg{Kind: ArgPtr}
		}
		return Ptr(b)
	}
	for _, p := range [][2]*Buffer{{rm, ins[3]}, {rv, ins[4]}} {
		if p[0] != nil {
			pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), CopyDst: p[0], CopySrc: p[1], CopyBytes: p[0].Bytes})
			pl.touch([]Arg{Ptr(p[0]), Ptr(p[1])})
		}
	}
	momentum := 1 - n.AttrFloat("momentum", 0.9)
	pl.launchRows("batchnorm_train_f32", C, Ptr(x), Ptr(ins[1]), Ptr(ins[2]), Ptr(y), opt(rm), opt(rv), Arg{Kind: ArgPtr}, Arg{Kind: ArgPtr},
		I64(N), I64(C), I64(hw), F32(n.AttrFloat("epsilon", 1e-5)), F32(momentum), I32(int(n.AttrInt(graph.UnbiasedVarAttr, 0))))
	return nil
}

func (pl *planner) gelu(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	approx := n.AttrString("approximate", "none")
	if approx != "none" && approx != "tanh" {
		return n.Errorf("Gelu approximate=%q", approx)
	}
	pl.launch1D("gelu_f32", o.Elements(), Ptr(x), Ptr(o), I64(o.Elements()), I32(boolInt(approx == "tanh")))
	return nil
}

// ---- optimizer-step ops (graph/optimizer_ops.go) -----------------------

// updateTarget returns the buffer an optimizer op writes output j (which
// replaces input i) into: the input's own buffer when it is state that no
// other node reads (the update is then made in place and the output is a
// view of it), else a fresh buffer holding a copy of the input.
func (pl *planner) updateTarget(i, j int) (*Buffer, error) {
	src, err := pl.in(i)
	if err != nil {
		return nil, err
	}
	name := pl.node.Inputs[i]
	if src.root().Kind == BufState && pl.readers[name] == 1 && pl.g != nil {
		pl.p.values[pl.node.Outputs[j]] = &Buffer{Name: pl.node.Outputs[j], Kind: BufState, DType: src.DType, Shape: src.Shape, Bytes: src.Bytes, of: src.root()}
		pl.p.InPlace++
		return src, nil
	}
	dst, err := pl.out(j)
	if err != nil {
		return nil, err
	}
	pl.p.Steps = append(pl.p.Steps, Step{Node: pl.node.Label(), CopyDst: dst, CopySrc: src, CopyBytes: dst.Bytes})
	pl.touch([]Arg{Ptr(dst), Ptr(src)})
	return dst, nil
}

func (pl *planner) optimizerOp(n *graph.Node) error {
	lay := graph.UpdatedInput(n)
	if lay == nil {
		return n.Errorf("malformed %s node", n.OpType)
	}
	k := int(n.AttrInt("tensors", 0))
	targets := make([]*Buffer, len(lay))
	for j, i := range lay {
		if i < 0 {
			continue
		}
		t, err := pl.updateTarget(i, j)
		if err != nil {
			return err
		}
		if t.DType != graph.Float32 {
			return n.Errorf("%s on %v tensors: float32 only", n.OpType, t.DType)
		}
		targets[j] = t
	}
	in := func(i int) *Buffer { b, _ := pl.in(i); return b }
	switch n.OpType {
	case graph.AccumulateGradOp:
		fresh := in(0)
		for t := range k {
			s, g := targets[t], in(1+k+t)
			pl.launch1D("accumulate_f32", s.Elements(), Ptr(s), Ptr(g), I64(s.Elements()), Ptr(fresh))
		}
	case graph.AdamUpdateOp:
		if n.AttrInt("gated", 0) == 1 {
			return n.Errorf("gated updates (fp16 steps skipped inside the program) are not implemented on CUDA")
		}
		consts, hyper := in(0), in(1)
		ams := n.AttrInt("amsgrad", 0) == 1
		for t := range k {
			p, g, m, v := targets[t], in(2+k+t), targets[k+t], targets[2*k+t]
			mx := Arg{Kind: ArgPtr}
			if ams {
				mx = Ptr(targets[3*k+t])
			}
			pl.launch1D("adam_update_f32", p.Elements(), Ptr(p), Ptr(g), Ptr(m), Ptr(v), mx, I64(p.Elements()),
				Ptr(consts), PtrAt(hyper, int64(t)*5*4), I32(int(n.AttrInt("maximize", 0))), I32(int(n.AttrInt("decoupled", 0))))
		}
	case graph.SGDUpdateOp:
		if n.AttrInt("gated", 0) == 1 {
			return n.Errorf("gated updates (fp16 steps skipped inside the program) are not implemented on CUDA")
		}
		consts, hyper := in(0), in(1)
		mom := n.AttrInt("momentum", 0) == 1
		for t := range k {
			p, g := targets[t], in(2+k+t)
			buf := Arg{Kind: ArgPtr}
			if mom {
				buf = Ptr(targets[k+t])
			}
			pl.launch1D("sgd_update_f32", p.Elements(), Ptr(p), Ptr(g), buf, I64(p.Elements()),
				Ptr(consts), PtrAt(hyper, int64(t)*3*4), I32(int(n.AttrInt("nesterov", 0))), I32(int(n.AttrInt("maximize", 0))))
		}
	case graph.UnscaleGradsOp:
		inv := in(0)
		found, err := pl.out(0)
		if err != nil {
			return err
		}
		pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), Zero: found})
		pl.touch([]Arg{Ptr(found)})
		for t := range k {
			g := targets[1+t]
			pl.launch1D("unscale_f32", g.Elements(), Ptr(g), I64(g.Elements()), Ptr(inv), Ptr(found))
		}
	case graph.ClipGradNormOp:
		maxNorm := in(0)
		total, err := pl.out(0)
		if err != nil {
			return err
		}
		norms := pl.scratch(graph.Float32, k)
		coef := pl.scratch(graph.Float32, 1)
		if total == nil {
			total = pl.scratch(graph.Float32, 1)
		}
		for t := range k {
			g := targets[1+t]
			pl.launchRows("reduce_rows_fp", 1, Ptr(g), PtrAt(norms, int64(t)*4), I64(1), I64(g.Elements()), I32(3), I32(int(graph.Float32)))
		}
		pl.launch1D("unary_fp", int64(k), Ptr(norms), Ptr(norms), I64(int64(k)), I32(2), I32(int(graph.Float32)))
		pl.emit(&Launch{Kernel: "clip_norm_total_f32", Grid: [3]uint32{1, 1, 1}, Block: [3]uint32{32, 1, 1},
			Args: []Arg{Ptr(norms), I64(int64(k)), Ptr(maxNorm), Ptr(total), Ptr(coef)}})
		for t := range k {
			g := targets[1+t]
			pl.launch1D("scale_by_f32", g.Elements(), Ptr(g), I64(g.Elements()), Ptr(coef))
		}
	case graph.ClipGradValueOp:
		clip := in(0)
		for t := range k {
			g := targets[t]
			pl.launch1D("clip_value_f32", g.Elements(), Ptr(g), I64(g.Elements()), Ptr(clip))
		}
	default:
		return n.Errorf("optimizer op %s has no CUDA plan", n.OpType)
	}
	return nil
}

var _ = slices.Clone[[]int]
