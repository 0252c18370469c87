package reduce

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() { kern.Register("CumSum", cumSum) }

// cumSum is CumSum (opset 11, 14): running sums along the axis given by the
// second input (a 0-d or one-element integer tensor), optionally exclusive
// (each sum leaves out its own element) and/or reversed (sums run from the
// end). float32 sums accumulate in float64.
func cumSum(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 2); err != nil {
		return nil, err
	}
	x := in[0]
	a, err := scalarInt(n, in[1], "axis input")
	if err != nil {
		return nil, err
	}
	if x.Rank() == 0 {
		return nil, n.Errorf("input must have rank 1 or more")
	}
	axis, err := kern.NormAxis(n, int(a), x.Rank())
	if err != nil {
		return nil, err
	}
	out, err := kern.New(n, x.DType, x.Shape)
	if err != nil {
		return nil, err
	}
	b := axisBlocks(x.Shape, axis)
	exclusive := n.AttrInt("exclusive", 0) != 0
	reverse := n.AttrInt("reverse", 0) != 0
	switch xs := x.Data.(type) {
	case []float32:
		cumSumBlocks[float32, float64](xs, out.Data.([]float32), b, exclusive, reverse)
	case []float64:
		cumSumBlocks[float64, float64](xs, out.Data.([]float64), b, exclusive, reverse)
	case []int8:
		cumSumBlocks[int8, int8](xs, out.Data.([]int8), b, exclusive, reverse)
	case []int16:
		cumSumBlocks[int16, int16](xs, out.Data.([]int16), b, exclusive, reverse)
	case []int32:
		cumSumBlocks[int32, int32](xs, out.Data.([]int32), b, exclusive, reverse)
	case []int64:
		cumSumBlocks[int64, int64](xs, out.Data.([]int64), b, exclusive, reverse)
	case []uint8:
		cumSumBlocks[uint8, uint8](xs, out.Data.([]uint8), b, exclusive, reverse)
	case []uint16:
		cumSumBlocks[uint16, uint16](xs, out.Data.([]uint16), b, exclusive, reverse)
	case []uint32:
		cumSumBlocks[uint32, uint32](xs, out.Data.([]uint32), b, exclusive, reverse)
	case []uint64:
		cumSumBlocks[uint64, uint64](xs, out.Data.([]uint64), b, exclusive, reverse)
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	return []*graph.Tensor{out}, nil
}

// cumSumBlocks writes running sums along r of each block of x into y,
// accumulating in A.
func cumSumBlocks[T, A number](x, y []T, b blocks, exclusive, reverse bool) {
	size := b.r * b.inner
	acc := make([]A, b.inner)
	for o := 0; o < b.outer; o++ {
		block := x[o*size : (o+1)*size]
		dst := y[o*size : (o+1)*size]
		clear(acc)
		for j := 0; j < b.r; j++ {
			k := j
			if reverse {
				k = b.r - 1 - j
			}
			src := block[k*b.inner : (k+1)*b.inner]
			row := dst[k*b.inner : (k+1)*b.inner]
			if exclusive {
				for i, v := range src {
					row[i] = T(acc[i])
					acc[i] += A(v)
				}
			} else {
				for i, v := range src {
					acc[i] += A(v)
					row[i] = T(acc[i])
				}
			}
		}
	}
}
