package shape

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterHalf("Transpose", transposeKernel)
	kern.RegisterHalf("DepthToSpace", depthToSpaceKernel)
	kern.RegisterHalf("SpaceToDepth", spaceToDepthKernel)
}

// transposeKernel implements Transpose: output axis i is input axis perm[i]
// (perm defaults to the reversed axes).
func transposeKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "data"); err != nil {
		return nil, err
	}
	r := x.Rank()
	// Perm, shape and maps live in the node's state: a new slice of each
	// would be allocated on every call.
	ts := kern.State[transposeState](n)
	perm := ts.perm[:0]
	if p := n.AttrInts("perm", nil); p != nil {
		if len(p) != r {
			return nil, n.Errorf("perm %v has %d entries, the input %v has rank %d", p, len(p), x.Shape, r)
		}
		var err error
		if perm, err = normAxesInto(n, perm, p, r); err != nil {
			return nil, n.Errorf("perm %v is not a permutation of the %d axes", p, r)
		}
	} else {
		for i := 0; i < r; i++ {
			perm = append(perm, r-1-i)
		}
	}
	ts.perm = perm
	// Row-major strides of x.
	st := append(ts.strides[:0], make([]int, r)...)
	acc := 1
	for i := r - 1; i >= 0; i-- {
		st[i] = acc
		acc *= x.Shape[i]
	}
	ts.strides = st
	shape, maps := ts.shape[:0], ts.maps[:0]
	for _, p := range perm {
		shape = append(shape, x.Shape[p])
		maps = append(maps, arith(x.Shape[p], 0, st[p]))
	}
	ts.shape, ts.maps = shape, maps
	out, err := gatherInto(n, x, shape, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// transposeState is a Transpose node's scratch between runs.
type transposeState struct {
	perm, strides, shape []int
	maps                 []axisMap
}

// blockInput checks the NCHW input of DepthToSpace/SpaceToDepth and reads
// the blocksize.
func blockInput(n *graph.Node, in []*graph.Tensor) (*graph.Tensor, int, error) {
	x := kern.Opt(in, 0)
	if err := checkData(n, x, "input"); err != nil {
		return nil, 0, err
	}
	if x.Rank() != 4 {
		return nil, 0, n.Errorf("input must be 4-D (N, C, H, W), has shape %v", x.Shape)
	}
	bs := n.AttrInt("blocksize", 0)
	if bs <= 0 || bs > 1<<20 {
		return nil, 0, n.Errorf("blocksize %d must be positive", bs)
	}
	return x, int(bs), nil
}

// depthToSpaceKernel implements DepthToSpace in DCR (default) and CRD mode:
// output[b, c, h*bs+i, w*bs+j] reads channel (i*bs+j)*C' + c (DCR) or
// c*bs*bs + i*bs + j (CRD), where C' = C/bs².
func depthToSpaceKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x, bs, err := blockInput(n, in)
	if err != nil {
		return nil, err
	}
	b, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	if c%(bs*bs) != 0 {
		return nil, n.Errorf("channels %d of input %v are not divisible by blocksize² = %d", c, x.Shape, bs*bs)
	}
	oc := c / (bs * bs)
	hw := h * w
	// Output viewed as [b, oc, h, i, w, j].
	var cStride, iStride, jStride int
	switch mode := n.AttrString("mode", "DCR"); mode {
	case "DCR":
		cStride, iStride, jStride = hw, bs*oc*hw, oc*hw
	case "CRD":
		cStride, iStride, jStride = bs*bs*hw, bs*hw, hw
	default:
		return nil, n.Errorf("mode %q is not DCR or CRD", mode)
	}
	maps := []axisMap{
		arith(b, 0, c*hw), arith(oc, 0, cStride), arith(h, 0, w),
		arith(bs, 0, iStride), arith(w, 0, 1), arith(bs, 0, jStride),
	}
	out, err := gatherInto(n, x, []int{b, oc, h * bs, w * bs}, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}

// spaceToDepthKernel implements SpaceToDepth: output[b, (i*bs+j)*C + c, h, w]
// reads input[b, c, h*bs+i, w*bs+j].
func spaceToDepthKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	x, bs, err := blockInput(n, in)
	if err != nil {
		return nil, err
	}
	b, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	if h%bs != 0 || w%bs != 0 {
		return nil, n.Errorf("height and width of input %v are not divisible by blocksize %d", x.Shape, bs)
	}
	oh, ow := h/bs, w/bs
	// Output viewed as [b, i, j, c, oh, ow].
	maps := []axisMap{
		arith(b, 0, c*h*w), arith(bs, 0, w), arith(bs, 0, 1),
		arith(c, 0, h*w), arith(oh, 0, bs*w), arith(ow, 0, bs),
	}
	out, err := gatherInto(n, x, []int{b, c * bs * bs, oh, ow}, 0, maps, nil)
	if err != nil {
		return nil, err
	}
	return kern.Results(n, out), nil
}
