package linalg

import (
	"math"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.Register("Det", detKernel)
}

// detKernel is Det: the determinant of each square matrix in the trailing
// two dims, by LU decomposition with partial pivoting in float64.
func detKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	r := len(x.Shape)
	if r < 2 || x.Shape[r-1] != x.Shape[r-2] {
		return nil, n.Errorf("input must be [*, M, M], got shape %v", x.Shape)
	}
	if x.DType != graph.Float32 && x.DType != graph.Float64 {
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	size := x.Shape[r-1]
	out, err := kern.New(n, x.DType, x.Shape[:r-2])
	if err != nil {
		return nil, err
	}
	batch := product(x.Shape[:r-2])
	work := make([]float64, size*size)
	for b := 0; b < batch; b++ {
		switch xd := x.Data.(type) {
		case []float32:
			for i := range work {
				work[i] = float64(xd[b*size*size+i])
			}
		case []float64:
			copy(work, xd[b*size*size:])
		}
		out.SetFloat(b, luDeterminant(work, size))
	}
	return []*graph.Tensor{out}, nil
}

// luDeterminant returns the determinant of the size×size matrix a
// (row-major), destroying a.
func luDeterminant(a []float64, size int) float64 {
	det := 1.0
	for col := 0; col < size; col++ {
		pivot, best := col, math.Abs(a[col*size+col])
		for r := col + 1; r < size; r++ {
			if v := math.Abs(a[r*size+col]); v > best || math.IsNaN(v) {
				pivot, best = r, v
			}
		}
		if best == 0 {
			return 0
		}
		if pivot != col {
			for j := 0; j < size; j++ {
				a[col*size+j], a[pivot*size+j] = a[pivot*size+j], a[col*size+j]
			}
			det = -det
		}
		d := a[col*size+col]
		det *= d
		for r := col + 1; r < size; r++ {
			f := a[r*size+col] / d
			if f == 0 {
				continue
			}
			row, prow := a[r*size:r*size+size], a[col*size:col*size+size]
			for j := col + 1; j < size; j++ {
				row[j] -= f * prow[j]
			}
		}
	}
	return det
}
