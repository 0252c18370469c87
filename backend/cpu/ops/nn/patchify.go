package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

func init() {
	kern.RegisterSpec(graph.FusedDomain, graph.Patchify, kern.Spec{Fn: patchifyKernel})
}

// patchifyState is a Patchify node's output shape, kept between runs.
type patchifyState struct{ shape [3]int }

// patchifyKernel is graph.Patchify: float32 X [N, C, H, W] rearranged
// into the patches of its KH×KW tiles, [N, (H/KH)·(W/KW), C·KH·KW], the
// patch matrix the patchify convolution path writes (Conv2D.writePatches:
// one item per row of tiles, spread over the cores).
func patchifyKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 1); err != nil {
		return nil, err
	}
	x := in[0]
	if x.DType != graph.Float32 || len(x.Shape) != 4 {
		return nil, n.Errorf("input X must be float32 of rank 4 (N, C, H, W), has %v of shape %v", x.DType, x.Shape)
	}
	k := n.AttrInts("kernel_shape", nil)
	if len(k) != 2 || k[0] < 1 || k[1] < 1 {
		return nil, n.Errorf("kernel_shape must hold two positive sizes, has %v", k)
	}
	kh, kw := int(k[0]), int(k[1])
	b, c, h, w := x.Shape[0], x.Shape[1], x.Shape[2], x.Shape[3]
	if h%kh != 0 || w%kw != 0 {
		return nil, n.Errorf("%d×%d tiles do not cover the %d×%d image of X %v exactly", kh, kw, h, w, x.Shape)
	}
	g := Conv2D{N: b, C: c, H: h, W: w, M: 1, KH: kh, KW: kw, SH: kh, SW: kw, DH: 1, DW: 1, OH: h / kh, OW: w / kw}
	st := kern.State[patchifyState](n)
	st.shape = [3]int{b, g.OH * g.OW, c * kh * kw}
	out, err := kern.NewUninit(n, graph.Float32, st.shape[:]) // every element is written
	if err != nil {
		return nil, err
	}
	if g.patchElems() > 0 {
		g.writePatches(x.Float32s(), out.Float32s())
	}
	return kern.Results(n, out), nil
}
