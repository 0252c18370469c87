package shape

import (
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Scatter", scatterElementsKernel)
	kern.RegisterHalf("ScatterElements", scatterElementsKernel)
	kern.RegisterHalf("ScatterND", scatterNDKernel)
}

// number is the set of element types scatter reductions do arithmetic on.
type number interface {
	~float32 | ~float64 | ~int8 | ~int16 | ~int32 | ~int64 | ~uint8 | ~uint16 | ~uint32 | ~uint64
}

// combiner returns the reduction function for "add", "mul", "max" or "min";
// nil for "none" (plain assignment).
func combiner[T number](red string) (func(a, b T) T, error) {
	switch red {
	case "none", "":
		return nil, nil
	case "add":
		return func(a, b T) T { return a + b }, nil
	case "mul":
		return func(a, b T) T { return a * b }, nil
	case "max":
		return func(a, b T) T { return max(a, b) }, nil
	case "min":
		return func(a, b T) T { return min(a, b) }, nil
	}
	return nil, fmt.Errorf("reduction %q is not none, add, mul, max or min", red)
}

// halfCombiner is combiner for float16/bfloat16 bits: it computes in float32
// and rounds back.
func halfCombiner(d graph.DType, red string) (func(a, b uint16) uint16, error) {
	f, err := combiner[float32](red)
	if err != nil || f == nil {
		return nil, err
	}
	to, from := graph.Float16ToFloat32, graph.Float32ToFloat16
	if d == graph.BFloat16 {
		to, from = graph.BFloat16ToFloat32, graph.Float32ToBFloat16
	}
	return func(a, b uint16) uint16 { return from(f(to(a), to(b))) }, nil
}

// checkReduction validates a scatter node's reduction attribute.
func checkReduction(n *graph.Node) (string, error) {
	red := n.AttrString("reduction", "none")
	if _, err := combiner[float32](red); err != nil {
		return "", n.Errorf("%v", err)
	}
	return red, nil
}

// scatterInto writes runs of run elements of upd into dst.Data at the
// offsets offs (in order, so the last of repeated offsets wins), combining
// them with what is there by the reduction.
func scatterInto(dst *graph.Tensor, upd any, offs []int, run int, red string) error {
	switch d := dst.Data.(type) {
	case []float32:
		return scatterNumbers(d, upd, offs, run, red)
	case []float64:
		return scatterNumbers(d, upd, offs, run, red)
	case []int8:
		return scatterNumbers(d, upd, offs, run, red)
	case []int16:
		return scatterNumbers(d, upd, offs, run, red)
	case []int32:
		return scatterNumbers(d, upd, offs, run, red)
	case []int64:
		return scatterNumbers(d, upd, offs, run, red)
	case []uint8:
		return scatterNumbers(d, upd, offs, run, red)
	case []uint16:
		if dst.DType == graph.Float16 || dst.DType == graph.BFloat16 {
			f, err := halfCombiner(dst.DType, red)
			if err != nil {
				return err
			}
			return scatterOf(d, upd, offs, run, f)
		}
		return scatterNumbers(d, upd, offs, run, red)
	case []uint32:
		return scatterNumbers(d, upd, offs, run, red)
	case []uint64:
		return scatterNumbers(d, upd, offs, run, red)
	case []bool:
		if red != "none" {
			return fmt.Errorf("reduction %q is not supported for bool", red)
		}
		return scatterOf(d, upd, offs, run, nil)
	case []string:
		if red != "none" {
			return fmt.Errorf("reduction %q is not supported for strings", red)
		}
		return scatterOf(d, upd, offs, run, nil)
	}
	return fmt.Errorf("tensor data of Go type %T is not supported", dst.Data)
}

func scatterNumbers[T number](dst []T, upd any, offs []int, run int, red string) error {
	f, err := combiner[T](red)
	if err != nil {
		return err
	}
	return scatterOf(dst, upd, offs, run, f)
}

func scatterOf[T any](dst []T, updAny any, offs []int, run int, f func(a, b T) T) error {
	upd, _, err := typedPair(dst, updAny, nil)
	if err != nil {
		return err
	}
	if len(upd) < len(offs)*run {
		return fmt.Errorf("updates hold %d elements, want %d", len(upd), len(offs)*run)
	}
	for i, o := range offs {
		u := upd[i*run : i*run+run]
		d := dst[o : o+run]
		if f == nil {
			copy(d, u)
			continue
		}
		for j := range d {
			d[j] = f(d[j], u[j])
		}
	}
	return nil
}

// scatterElementsKernel implements ScatterElements (and its deprecated
// alias Scatter): a copy of data where data[..., indices[i...], ...] along
// axis takes (or is reduced with) updates[i...].
func scatterElementsKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	x, ind, upd := in[0], in[1], in[2]
	red, err := checkReduction(n)
	if err != nil {
		return nil, err
	}
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	if err := checkData(n, upd, "updates"); err != nil {
		return nil, err
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("data must have rank 1 or more")
	}
	if !graph.SameShape(ind.Shape, upd.Shape) {
		return nil, n.Errorf("indices %v and updates %v must have the same shape", ind.Shape, upd.Shape)
	}
	if upd.DType != x.DType {
		return nil, n.Errorf("updates have dtype %v, data %v", upd.DType, x.DType)
	}
	ax, err := normAxis(n, n.AttrInt("axis", 0), x.Rank())
	if err != nil {
		return nil, err
	}
	offs, err := elementOffsets(n, x, ind, ax)
	if err != nil {
		return nil, err
	}
	out := x.Clone()
	if err := scatterInto(out, upd.Data, offs, 1, red); err != nil {
		return nil, n.Errorf("%v", err)
	}
	return []*graph.Tensor{out}, nil
}

// scatterNDKernel implements ScatterND: a copy of data where the slice each
// index tuple addresses takes (or is reduced with) the matching slice of
// updates.
func scatterNDKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	x, ind, upd := in[0], in[1], in[2]
	red, err := checkReduction(n)
	if err != nil {
		return nil, err
	}
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	if err := checkData(n, upd, "updates"); err != nil {
		return nil, err
	}
	if upd.DType != x.DType {
		return nil, n.Errorf("updates have dtype %v, data %v", upd.DType, x.DType)
	}
	offs, slice, err := ndOffsets(n, x, ind, 0)
	if err != nil {
		return nil, err
	}
	k := ind.Shape[ind.Rank()-1]
	want := append(append([]int{}, ind.Shape[:ind.Rank()-1]...), x.Shape[k:]...)
	if !graph.SameShape(want, upd.Shape) {
		return nil, n.Errorf("updates have shape %v, want %v (indices %v, data %v)", upd.Shape, want, ind.Shape, x.Shape)
	}
	out := x.Clone()
	if err := scatterInto(out, upd.Data, offs, slice, red); err != nil {
		return nil, n.Errorf("%v", err)
	}
	return []*graph.Tensor{out}, nil
}
