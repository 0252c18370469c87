package cuda

import (
	"slices"

	"github.com/onnxtrain/onnxtrain/graph"
)

// reduceAxes returns the sorted, normalised axes a Reduce node reduces
// (nil: none, which with noop_with_empty_axes makes the op a copy).
func (pl *planner) reduceAxes(n *graph.Node, rank int) ([]int, bool, error) {
	var axes []int64
	fromInput := (n.OpType == "ReduceSum" && pl.opset >= 13) || pl.opset >= 18
	if fromInput && len(n.Inputs) > 1 && n.Inputs[1] != "" {
		v, _, err := pl.constInts(1)
		if err != nil {
			return nil, false, err
		}
		axes = v
	} else if !fromInput {
		axes = n.AttrInts("axes", nil)
	}
	if len(axes) == 0 {
		if n.AttrInt("noop_with_empty_axes", 0) == 1 {
			return nil, true, nil
		}
		out := make([]int, rank)
		for i := range out {
			out[i] = i
		}
		return out, false, nil
	}
	out := make([]int, 0, len(axes))
	for _, a := range axes {
		ax, err := normAxis(a, rank)
		if err != nil {
			return nil, false, n.Errorf("%v", err)
		}
		if !slices.Contains(out, ax) {
			out = append(out, ax)
		}
	}
	slices.Sort(out)
	return out, false, nil
}

// axisRuns groups sorted axes into runs of consecutive axes.
func axisRuns(axes []int) [][2]int {
	var runs [][2]int
	for _, a := range axes {
		if len(runs) > 0 && runs[len(runs)-1][1] == a {
			runs[len(runs)-1][1] = a + 1
			continue
		}
		runs = append(runs, [2]int{a, a + 1})
	}
	return runs
}

// reduce emits one pass per run of consecutive axes, last run first, each
// over an [outer, reduced, inner] view; intermediate results keep their
// dims as 1s (the layout keepdims does not change).
func (pl *planner) reduce(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	if !isFloatKernelType(x.DType) {
		return n.Errorf("%s on %v: the CUDA reductions are for floating-point tensors", n.OpType, x.DType)
	}
	axes, noop, err := pl.reduceAxes(n, len(x.Shape))
	if err != nil {
		return err
	}
	if noop {
		pl.p.Steps = append(pl.p.Steps, Step{Node: n.Label(), CopyDst: o, CopySrc: x, CopyBytes: o.Bytes})
		pl.touch([]Arg{Ptr(o), Ptr(x)})
		return nil
	}
	op := map[string]int{"ReduceSum": 0, "ReduceMax": 1, "ReduceMean": 2}[n.OpType]
	runs := axisRuns(axes)
	cur, shape := x, slices.Clone(x.Shape)
	for i := len(runs) - 1; i >= 0; i-- {
		lo, hi := runs[i][0], runs[i][1]
		outer, mid, inner := split3(shape, lo, hi)
		for d := lo; d < hi; d++ {
			shape[d] = 1
		}
		dst := o
		if i > 0 {
			dst = pl.scratch(x.DType, slices.Clone(shape)...)
		}
		if inner == 1 && mid >= 1024 {
			pl.launchRows("reduce_rows_fp", outer, Ptr(cur), Ptr(dst), I64(outer), I64(mid), I32(op), I32(int(x.DType)))
		} else {
			pl.launch1D("reduce_fp", outer*inner, Ptr(cur), Ptr(dst), I64(outer), I64(mid), I64(inner), I32(op), I32(int(x.DType)))
		}
		cur = dst
	}
	return nil
}

func (pl *planner) argmax(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	ax, err := normAxis(n.AttrInt("axis", 0), len(x.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	if x.DType != graph.Float32 {
		return n.Errorf("ArgMax on %v: float32 only", x.DType)
	}
	outer, r, inner := split3(x.Shape, ax, ax+1)
	pl.launch1D("argmax_f32", outer*inner, Ptr(x), Ptr(o), I64(outer), I64(r), I64(inner), I32(int(n.AttrInt("select_last_index", 0))))
	return nil
}

func (pl *planner) cumsum(n *graph.Node) error {
	x, err := pl.in(0)
	if err != nil {
		return err
	}
	axv, _, err := pl.constInts(1)
	if err != nil {
		return err
	}
	o, err := pl.out(0)
	if err != nil {
		return err
	}
	if len(axv) != 1 {
		return n.Errorf("CumSum axis must be one value")
	}
	ax, err := normAxis(axv[0], len(x.Shape))
	if err != nil {
		return n.Errorf("%v", err)
	}
	outer, r, inner := split3(x.Shape, ax, ax+1)
	pl.launch1D("cumsum_f32", outer*inner, Ptr(x), Ptr(o), I64(outer), I64(r), I64(inner),
		I32(int(n.AttrInt("exclusive", 0))), I32(int(n.AttrInt("reverse", 0))))
	return nil
}
