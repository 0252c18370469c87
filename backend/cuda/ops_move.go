package cuda

import (
	"encoding/binary"
	"math"

	"github.com/onnxtrain/onnxtrain/graph"
)

// copyView emits a strided copy: ix.Strides[0]/Offset[0] index the source,
// Strides[1]/Offset[1] the destination, over ix.Dims.
func (pl *planner) copyView(src, dst *Buffer, ix Index) {
	n := int64(1)
	for d := range ix.Rank {
		n *= ix.Dims[d]
	}
	if n == 0 {
		return
	}
	pl.launch1D("strided_copy", n, Ptr(src), Ptr(dst), I64(n), I32(src.DType.Size()), Idx(ix))
}

// permuted is the Index that reads src transposed by perm into a
// contiguous destination of the permuted shape.
func permuted(shape []int, perm []int) (Index, []int) {
	var ix Index
	st := contiguousStrides(shape)
	out := make([]int, len(perm))
	for d, p := range perm {
		out[d] = shape[p]
	}
	ix.Rank = int64(len(out))
	ost := contiguousStrides(out)
	for d, p := range perm {
		ix.Dims[d] = int64(out[d])
		ix.Strides[0][d] = st[p]
		ix.Strides[1][d] = ost[d]
	}
	if ix.Rank == 0 {
		ix.Rank, ix.Dims[0] = 1, 1
	}
	return ix, out
}

func (pl *planner) transpose(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	perm := toInts(n.AttrInts("perm", nil))
	if len(perm) == 0 {
		for i := len(x.Shape) - 1; i >= 0; i-- {
			perm = append(perm, i)
		}
	}
	if len(perm) > MaxRank {
		return n.Errorf("rank %d above %d", len(perm), MaxRank)
	}
	ix, _ := permuted(x.Shape, perm)
	pl.copyView(x, o, ix)
	return nil
}

func (pl *planner) expand() error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	ix, err := broadcastIndex(o.Shape, x.Shape)
	if err != nil {
		return pl.node.Errorf("%v", err)
	}
	copy(ix.Strides[1][:], contiguousStrides(o.Shape))
	pl.copyView(x, o, ix)
	return nil
}

// slice reads starts, ends, axes and steps (inputs from opset 10,
// attributes before), clamps them as numpy does, and copies the view.
func (pl *planner) slice(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	var starts, axes, steps []int64
	if pl.opset >= 10 {
		if starts, _, err = pl.constInts(1); err != nil {
			return err
		}
		// ends only decide the output's shape, which inference fixed.
		if axes, _, err = pl.constInts(3); err != nil {
			return err
		}
		if steps, _, err = pl.constInts(4); err != nil {
			return err
		}
	} else {
		starts, axes = n.AttrInts("starts", nil), n.AttrInts("axes", nil)
	}
	r := len(x.Shape)
	st := contiguousStrides(x.Shape)
	var ix Index
	ix.Rank = int64(r)
	ost := contiguousStrides(o.Shape)
	for d := range r {
		ix.Dims[d] = int64(o.Shape[d])
		ix.Strides[0][d] = st[d]
		ix.Strides[1][d] = ost[d]
	}
	for i := range starts {
		ax := i
		if axes != nil {
			a, err := normAxis(axes[i], r)
			if err != nil {
				return n.Errorf("%v", err)
			}
			ax = a
		}
		step := int64(1)
		if steps != nil {
			step = steps[i]
		}
		if step == 0 {
			return n.Errorf("step 0 on axis %d", ax)
		}
		dim := int64(x.Shape[ax])
		s := starts[i]
		if s < 0 {
			s += dim
		}
		if step > 0 {
			s = min(max(s, 0), dim)
		} else {
			s = min(max(s, -1), dim-1)
		}
		ix.Offset[0] += s * st[ax]
		ix.Strides[0][ax] = st[ax] * step
	}
	if ix.Rank == 0 {
		ix.Rank, ix.Dims[0] = 1, 1
	}
	pl.copyView(x, o, ix)
	return nil
}

func (pl *planner) concat(n *graph.Node) error {
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	ax, err := normAxis(n.AttrInt("axis", 0), len(o.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	ost := contiguousStrides(o.Shape)
	var at int64
	for i := range n.Inputs {
		x, err := pl.in(i)
		if err != nil {
			return err
		}
		if x == nil {
			continue
		}
		var ix Index
		ix.Rank = int64(len(x.Shape))
		st := contiguousStrides(x.Shape)
		for d := range x.Shape {
			ix.Dims[d] = int64(x.Shape[d])
			ix.Strides[0][d] = st[d]
			ix.Strides[1][d] = ost[d]
		}
		ix.Offset[1] = at * ost[ax]
		at += int64(x.Shape[ax])
		pl.copyView(x, o, ix)
	}
	return nil
}

func (pl *planner) gather(n *graph.Node) error {
	data, err := pl.in(0)
	if err != nil {
		return err
	}
	idx, err := pl.in(1)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	ax, err := normAxis(n.AttrInt("axis", 0), len(data.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	outer, axisLen, inner := split3(data.Shape, ax, ax+1)
	nidx := idx.Elements()
	if idx.DType != graph.Int64 && idx.DType != graph.Int32 {
		return n.Errorf("indices of dtype %v", idx.DType)
	}
	i32 := 0
	if idx.DType == graph.Int32 {
		i32 = 1
	}
	pl.launch1D("gather", outer*nidx*inner, Ptr(data), Ptr(idx), Ptr(o), I64(outer), I64(axisLen), I64(inner), I64(nidx),
		I32(data.DType.Size()), I32(i32))
	return nil
}

// elements plans GatherElements and ScatterElements where the indices
// have the data's dims except along the axis.
func (pl *planner) elements(n *graph.Node) error {
	data, err := pl.in(0)
	if err != nil {
		return err
	}
	idx, err := pl.in(1)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	ax, err := normAxis(n.AttrInt("axis", 0), len(data.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	if !isFloatKernelType(data.DType) || idx.DType != graph.Int64 {
		return n.Errorf("%s on %v data with %v indices: floating-point data and int64 indices only", n.OpType, data.DType, idx.DType)
	}
	for d := range data.Shape {
		if d != ax && idx.Shape[d] != data.Shape[d] {
			return n.Errorf("indices %v and data %v differ outside the axis", idx.Shape, data.Shape)
		}
	}
	// Half-precision data go through float32 copies (the kernels, and
	// add's atomics, are float32).
	toF32 := func(b *Buffer) *Buffer {
		if b.DType == graph.Float32 {
			return b
		}
		f := pl.scratch(graph.Float32, b.Shape...)
		pl.launch1D("cast_any", f.Elements(), Ptr(b), Ptr(f), I64(f.Elements()), I32(int(b.DType)), I32(int(graph.Float32)))
		return f
	}
	out := o
	if o.DType != graph.Float32 {
		out = pl.scratch(graph.Float32, o.Shape...)
	}
	outer, idxLen, inner := split3(idx.Shape, ax, ax+1)
	dataLen := int64(data.Shape[ax])
	if n.OpType == "GatherElements" {
		pl.launch1D("gather_elements_f32", outer*idxLen*inner, Ptr(toF32(data)), Ptr(idx), Ptr(out), I64(outer), I64(idxLen), I64(inner), I64(dataLen))
	} else {
		upd, err := pl.in(2)
		if err != nil {
			return err
		}
		red := map[string]int{"none": 0, "add": 1, "mul": 2, "max": 3, "min": 4}[n.AttrString("reduction", "none")]
		src := toF32(data)
		pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), CopyDst: out, CopySrc: src, CopyBytes: out.Bytes})
		pl.touch([]Arg{Ptr(out), Ptr(src)})
		pl.launch1D("scatter_elements_f32", outer*idxLen*inner, Ptr(out), Ptr(idx), Ptr(toF32(upd)), I64(outer), I64(idxLen), I64(inner), I64(dataLen), I32(red))
	}
	if out != o {
		pl.launch1D("cast_any", o.Elements(), Ptr(out), Ptr(o), I64(o.Elements()), I32(int(graph.Float32)), I32(int(o.DType)))
	}
	return nil
}

// valueBits is a scalar's bytes as the fill kernel takes them.
func valueBits(dt graph.DType, v float64) uint64 {
	switch dt {
	case graph.Float32:
		return uint64(math.Float32bits(float32(v)))
	case graph.Float64:
		return math.Float64bits(v)
	case graph.Bool:
		if v != 0 {
			return 1
		}
		return 0
	default:
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], uint64(int64(v)))
		return binary.LittleEndian.Uint64(b[:])
	}
}

func (pl *planner) pad(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	var pads []int64
	if pl.opset >= 11 {
		if pads, _, err = pl.constInts(1); err != nil {
			return err
		}
	} else {
		pads = n.AttrInts("pads", nil)
	}
	r := len(x.Shape)
	if pl.opset >= 18 && len(n.Inputs) > 3 && n.Inputs[3] != "" {
		axes, _, err := pl.constInts(3)
		if err != nil {
			return err
		}
		full := make([]int64, 2*r)
		for i, a := range axes {
			ax, err := normAxis(a, r)
			if err != nil {
				return n.Errorf("%v", err)
			}
			full[ax], full[ax+r] = pads[i], pads[i+len(axes)]
		}
		pads = full
	}
	if len(pads) != 2*r {
		return n.Errorf("%d pads for rank %d", len(pads), r)
	}
	mode := n.AttrString("mode", "constant")
	ist, ost := contiguousStrides(x.Shape), contiguousStrides(o.Shape)
	if mode == "constant" {
		val := 0.0
		if v, ok := pl.constFloat(2); ok {
			val = v
		} else if pl.opset < 11 {
			val = float64(n.AttrFloat("value", 0))
		}
		pl.launch1D("fill", o.Elements(), Ptr(o), I64(o.Elements()), I32(o.DType.Size()), I64(int64(valueBits(o.DType, val))))
		var ix Index
		ix.Rank = int64(r)
		for d := range r {
			lo, hi := pads[d], pads[d+r]
			ix.Dims[d] = int64(x.Shape[d]) + min(lo, 0) + min(hi, 0)
			ix.Strides[0][d], ix.Strides[1][d] = ist[d], ost[d]
			ix.Offset[0] += max(-lo, 0) * ist[d]
			ix.Offset[1] += max(lo, 0) * ost[d]
		}
		if ix.Rank == 0 {
			ix.Rank, ix.Dims[0] = 1, 1
		}
		pl.copyView(x, o, ix)
		return nil
	}
	m := map[string]int{"reflect": 1, "edge": 2, "wrap": 3}[mode]
	if m == 0 {
		return n.Errorf("pad mode %q", mode)
	}
	var ix, lo Index
	ix.Rank, lo.Rank = int64(r), int64(r)
	for d := range r {
		if pads[d] < 0 || pads[d+r] < 0 {
			return n.Errorf("negative pads with mode %s", mode)
		}
		ix.Dims[d] = int64(o.Shape[d])
		ix.Strides[0][d] = ist[d]
		lo.Dims[d] = int64(x.Shape[d])
		lo.Strides[0][d] = pads[d]
	}
	pl.launch1D("pad_mode", o.Elements(), Ptr(x), Ptr(o), I64(o.Elements()), I32(o.DType.Size()), I32(m), Idx(ix), Idx(lo))
	return nil
}

// dropout plans Dropout: a copy (inference, or ratio 0), else the
// dropout kernel drawing from the executable's stream.
func (pl *planner) dropout(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	ratio := float64(n.AttrFloat("ratio", 0.5)) // opsets before 12
	if pl.opset >= 12 {
		ratio = 0.5
		if v, ok := pl.constFloat(1); ok {
			ratio = v
		} else if n.Input(1) != "" {
			return n.Errorf("ratio must be a constant")
		}
	}
	training := pl.opset < 7 && n.AttrInt("is_test", 0) == 0
	if pl.opset >= 12 {
		if v, ok := pl.constFloat(2); ok {
			training = v != 0
		} else if n.Input(2) != "" {
			return n.Errorf("training_mode must be a constant")
		}
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	mask, err := pl.out(1)
	if err != nil {
		return err
	}
	if !training || ratio == 0 {
		pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), CopyDst: o, CopySrc: x, CopyBytes: o.Bytes})
		pl.touch([]Arg{Ptr(o), Ptr(x)})
		if mask != nil {
			pl.launch1D("fill", mask.Elements(), Ptr(mask), I64(mask.Elements()), I32(1), I64(1))
		}
		return nil
	}
	if x.DType != graph.Float32 {
		return n.Errorf("Dropout on %v: float32 only", x.DType)
	}
	ma := Arg{Kind: ArgPtr}
	if mask != nil {
		ma = Ptr(mask)
	}
	pl.p.Random = true
	pl.launch1D("dropout_f32", o.Elements(), Ptr(x), Ptr(o), ma, I64(o.Elements()), I64(0), I64(pl.random), F32(float32(ratio)))
	pl.p.RandomLaunches = append(pl.p.RandomLaunches, len(pl.p.Steps)-1)
	pl.p.RandomBase = append(pl.p.RandomBase, pl.random)
	pl.random += o.Elements()
	pl.p.RandomPerRun = pl.random
	return nil
}

// randomUniform draws from the executable's counter-based stream: the
// launch's offset argument is advanced by the executable before each run
// (Plan.RandomLaunches), so steps draw fresh numbers and a replay of the
// same seed and run number draws the same ones.
func (pl *planner) randomUniform(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	_ = x
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	if o.DType != graph.Float32 {
		return n.Errorf("RandomUniformLike to %v: float32 only", o.DType)
	}
	pl.p.Random = true
	pl.launch1D("random_uniform_f32", o.Elements(), Ptr(o), I64(o.Elements()), I64(0), I64(pl.random),
		F32(n.AttrFloat("low", 0)), F32(n.AttrFloat("high", 1)))
	pl.p.RandomLaunches = append(pl.p.RandomLaunches, len(pl.p.Steps)-1)
	pl.p.RandomBase = append(pl.p.RandomBase, pl.random)
	pl.random += o.Elements()
	pl.p.RandomPerRun = pl.random
	return nil
}
