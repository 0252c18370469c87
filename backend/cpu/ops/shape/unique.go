package shape

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Unique", uniqueKernel)
}

// uniqueKernel implements Unique: the distinct elements of the flattened
// input, or the distinct slices along axis, sorted (default) or in order of
// first occurrence, with their first indices, the inverse map and counts.
func uniqueKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "X"); err != nil {
		return nil, err
	}
	outer, count, inner := 1, x.Size(), 1
	ax := -1
	if a := n.Attr("axis"); a != nil {
		var err error
		if ax, err = normAxis(n, a.I, x.Rank()); err != nil {
			return nil, err
		}
		outer, count, inner = prod(x.Shape[:ax]), x.Shape[ax], prod(x.Shape[ax+1:])
	}
	// Half floats are compared as float32 (their raw bits do not sort).
	keys := x
	if x.DType == graph.Float16 || x.DType == graph.BFloat16 {
		var err error
		if keys, err = kern.Cast(x, graph.Float32); err != nil {
			return nil, n.Errorf("%v", err)
		}
	}
	order, starts, err := uniqueGroups(keys.Data, outer, count, inner)
	if err != nil {
		return nil, n.Errorf("%v", err)
	}
	groups := len(starts) - 1
	// first[g] is the first occurrence of group g: the stable sort keeps
	// equal slices in index order.
	first := make([]int, groups)
	for g := range first {
		first[g] = order[starts[g]]
	}
	// rank lists the groups in output order.
	rank := make([]int, groups)
	for g := range rank {
		rank[g] = g
	}
	if n.AttrInt("sorted", 1) == 0 {
		slices.SortFunc(rank, func(a, b int) int { return cmp.Compare(first[a], first[b]) })
	}
	indices := make([]int64, groups)
	counts := make([]int64, groups)
	inverse := make([]int64, count)
	sel := make([]int, groups)
	for u, g := range rank {
		indices[u] = int64(first[g])
		counts[u] = int64(starts[g+1] - starts[g])
		sel[u] = first[g] * inner
		for _, j := range order[starts[g]:starts[g+1]] {
			inverse[j] = int64(u)
		}
	}
	shape := []int{groups}
	if ax >= 0 {
		shape = append([]int{}, x.Shape...)
		shape[ax] = groups
	}
	maps := []axisMap{arith(outer, 0, count*inner), tabled(sel), arith(inner, 0, 1)}
	y, err := gatherInto(n, x, shape, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return []*graph.Tensor{y, int64Tensor(indices), int64Tensor(inverse), int64Tensor(counts)}, nil
}

// uniqueGroups sorts the count candidates of data (viewed as [outer, count,
// inner]; candidate j is the slice [:, j, :]) stably and lexicographically,
// and groups equal ones: group g is order[starts[g]:starts[g+1]].
func uniqueGroups(data any, outer, count, inner int) (order, starts []int, err error) {
	switch d := data.(type) {
	case []float32:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[float32])
	case []float64:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[float64])
	case []int8:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[int8])
	case []int16:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[int16])
	case []int32:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[int32])
	case []int64:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[int64])
	case []uint8:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[uint8])
	case []uint16:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[uint16])
	case []uint32:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[uint32])
	case []uint64:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[uint64])
	case []string:
		order, starts = groupSlices(d, outer, count, inner, cmp.Compare[string])
	case []bool:
		order, starts = groupSlices(d, outer, count, inner, func(a, b bool) int {
			switch {
			case a == b:
				return 0
			case b:
				return -1
			}
			return 1
		})
	default:
		return nil, nil, fmt.Errorf("tensor data of Go type %T is not supported", data)
	}
	return order, starts, nil
}

func groupSlices[T any](d []T, outer, count, inner int, compare func(a, b T) int) (order, starts []int) {
	row := count * inner
	cmpSlices := func(p, q int) int {
		for o := 0; o < outer; o++ {
			a := d[o*row+p*inner : o*row+p*inner+inner]
			b := d[o*row+q*inner : o*row+q*inner+inner]
			for i := range a {
				if c := compare(a[i], b[i]); c != 0 {
					return c
				}
			}
		}
		return 0
	}
	order = make([]int, count)
	for j := range order {
		order[j] = j
	}
	slices.SortStableFunc(order, cmpSlices)
	starts = make([]int, 0, count+1)
	for k := range order {
		if k == 0 || cmpSlices(order[k-1], order[k]) != 0 {
			starts = append(starts, k)
		}
	}
	starts = append(starts, count)
	return order, starts
}
