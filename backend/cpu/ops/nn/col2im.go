package nn

import (
	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// col2imKernel implements Col2Im: the (N, C·prod(block_shape), L) column
// blocks are summed back into (N, C, image_shape...) images, the adjoint of
// the im2col that a convolution with these strides, dilations and pads does.
func col2imKernel(_ *kern.Context, n *graph.Node, in []*graph.Tensor) ([]*graph.Tensor, error) {
	if err := kern.Need(n, in, 3); err != nil {
		return nil, err
	}
	x := in[0]
	image, block := in[1].Ints(), in[2].Ints()
	r := len(image)
	if r == 0 || len(block) != r {
		return nil, n.Errorf("image_shape %v and block_shape %v must be non-empty and of one length", image, block)
	}
	if len(x.Shape) != 3 {
		return nil, n.Errorf("input must be (N, C·prod(block_shape), L), has shape %v", x.Shape)
	}
	k := prod(block)
	for _, d := range block {
		if d <= 0 {
			return nil, n.Errorf("block_shape %v must be positive", block)
		}
	}
	if x.Shape[1]%k != 0 {
		return nil, n.Errorf("input dim 1 (%d) is not a multiple of prod(block_shape %v) = %d", x.Shape[1], block, k)
	}
	for _, d := range image {
		if d < 0 {
			return nil, n.Errorf("image_shape %v must not be negative", image)
		}
	}
	w, err := resolveWindow(n, image, block, windowOpts{})
	if err != nil {
		return nil, err
	}
	if l := prod(w.out); l != x.Shape[2] {
		return nil, n.Errorf("input has %d blocks, but image_shape %v with block_shape %v gives %v = %d", x.Shape[2], image, block, w.out, l)
	}
	nb, c := x.Shape[0], x.Shape[1]/k
	y, err := kern.New(n, x.DType, concatShape([]int{nb, c}, image))
	if err != nil {
		return nil, err
	}
	switch xd := x.Data.(type) {
	case []float32:
		col2imImages(y.Data.([]float32), xd, nb, c, w)
	case []float64:
		col2imImages(y.Data.([]float64), xd, nb, c, w)
	case []int8:
		col2imImages(y.Data.([]int8), xd, nb, c, w)
	case []int16:
		col2imImages(y.Data.([]int16), xd, nb, c, w)
	case []int32:
		col2imImages(y.Data.([]int32), xd, nb, c, w)
	case []int64:
		col2imImages(y.Data.([]int64), xd, nb, c, w)
	case []uint8:
		col2imImages(y.Data.([]uint8), xd, nb, c, w)
	case []uint16:
		col2imImages(y.Data.([]uint16), xd, nb, c, w)
	case []uint32:
		col2imImages(y.Data.([]uint32), xd, nb, c, w)
	case []uint64:
		col2imImages(y.Data.([]uint64), xd, nb, c, w)
	default:
		return nil, n.Errorf("dtype %v is not supported", x.DType)
	}
	return []*graph.Tensor{y}, nil
}

// col2imImages runs col2imAdd for each of nb images of c channels.
func col2imImages[T nnNumber](y, x []T, nb, c int, w *window) {
	img, cols := c*prod(w.in), c*prod(w.kernel)*prod(w.out)
	if img == 0 || cols == 0 {
		return
	}
	rows := prod(w.out) / w.out[w.rank()-1]
	for i := 0; i < nb; i++ {
		col2imAdd(y[i*img:(i+1)*img], x[i*cols:(i+1)*cols], c, w, 0, rows)
	}
}
