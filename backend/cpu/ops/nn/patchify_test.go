package nn

import (
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	"github.com/onnxtrain/onnxtrain/graph"
)

// runPatchify runs the Patchify kernel on x with kernel_shape k.
func runPatchify(t *testing.T, x *graph.Tensor, k ...int64) ([]*graph.Tensor, error) {
	t.Helper()
	spec, ok := kern.Lookup(graph.FusedDomain, graph.Patchify, 17)
	require.True(t, ok, "no Patchify kernel")
	n := &graph.Node{Name: "patchify", OpType: graph.Patchify, Domain: graph.FusedDomain, Inputs: []string{"x"}, Outputs: []string{"p"}}
	if k != nil {
		n.SetAttr(graph.IntsAttr("kernel_shape", k...))
	}
	return spec.Fn(&kern.Context{Opset: 17}, n, []*graph.Tensor{x})
}

// TestPatchifyKernel: every element of the patches is the X element the
// op's definition names (row oh·OW + ow of image n, column (c·KH + a)·KW
// + b holds X[n, c, oh·KH + a, ow·KW + b]), for square, oblong and
// one-row tiles and batches enough that both cores work; malformed nodes
// and inputs are errors.
func TestPatchifyKernel(t *testing.T) {
	old := runtime.GOMAXPROCS(2)
	defer runtime.GOMAXPROCS(old)
	rng := rand.New(rand.NewPCG(4, 5))
	for _, c := range []struct{ n, ch, h, w, kh, kw int }{
		{2, 3, 8, 12, 4, 3}, {4, 3, 224, 224, 16, 16}, {3, 2, 6, 6, 1, 2}, {1, 1, 5, 5, 5, 5}, {8, 5, 4, 4, 2, 2},
	} {
		x := make([]float32, c.n*c.ch*c.h*c.w)
		for i := range x {
			x[i] = rng.Float32()
		}
		out, err := runPatchify(t, graph.FromFloat32(x, c.n, c.ch, c.h, c.w), int64(c.kh), int64(c.kw))
		require.NoError(t, err)
		oh, ow, ckk := c.h/c.kh, c.w/c.kw, c.ch*c.kh*c.kw
		require.Equal(t, []int{c.n, oh * ow, ckk}, out[0].Shape)
		p := out[0].Float32s()
		for img := 0; img < c.n; img++ {
			for i := 0; i < oh; i++ {
				for j := 0; j < ow; j++ {
					for ch := 0; ch < c.ch; ch++ {
						for a := 0; a < c.kh; a++ {
							for b := 0; b < c.kw; b++ {
								got := p[(img*oh*ow+i*ow+j)*ckk+(ch*c.kh+a)*c.kw+b]
								want := x[((img*c.ch+ch)*c.h+i*c.kh+a)*c.w+j*c.kw+b]
								if got != want {
									require.Failf(t, "wrong element", "%+v: image %d tile (%d, %d) tap (%d, %d, %d): %v, want %v", c, img, i, j, ch, a, b, got, want)
								}
							}
						}
					}
				}
			}
		}
	}
	for name, run := range map[string]func() error{
		"rank 3": func() error {
			_, err := runPatchify(t, graph.FromFloat32(make([]float32, 48), 3, 4, 4), 2, 2)
			return err
		},
		"float64": func() error {
			_, err := runPatchify(t, graph.FromFloat64(make([]float64, 48), 1, 3, 4, 4), 2, 2)
			return err
		},
		"no kernel_shape": func() error { _, err := runPatchify(t, graph.FromFloat32(make([]float32, 48), 1, 3, 4, 4)); return err },
		"one size": func() error {
			_, err := runPatchify(t, graph.FromFloat32(make([]float32, 48), 1, 3, 4, 4), 2)
			return err
		},
		"zero size": func() error {
			_, err := runPatchify(t, graph.FromFloat32(make([]float32, 48), 1, 3, 4, 4), 0, 2)
			return err
		},
		"rows not covered": func() error {
			_, err := runPatchify(t, graph.FromFloat32(make([]float32, 60), 1, 3, 5, 4), 2, 2)
			return err
		},
	} {
		require.Error(t, run(), name)
	}
}
