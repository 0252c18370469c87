package optimizer

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/gradient" // MatMulGradB
	"github.com/onnxtrain/onnxtrain/graph"
)

// productCase is one SGDUpdateProduct or AdamUpdateProduct set-up: A's
// shape (its last dimension X's rows), X's columns, the update's mode
// (attributes on), the per-tensor ClipGradNorm's max_norm taken in (0:
// none), a gated skip, and the rows a block holds.
type productCase struct {
	name      string
	aShape    []int
	cols      int
	adam      bool
	on        []string
	first, wd bool
	norm      float32
	skip      *bool
	block     int
}

// TestUpdateProductMatchesMatMulGradBThenUpdate: SGDUpdateProduct and
// AdamUpdateProduct give MatMulGradB-then-SGDUpdate's (AdamUpdate's) bits
// for X and its buffers, two steps each, the nodes keeping their state: one
// block and many (blocks of 1, 5 and 64 rows, the last one short), a
// rank-2 and a rank-4 A, every SGD mode, Adam with L2 decay, AdamW with
// amsgrad, maximize, a matrix updated on every core; with the per-tensor
// ClipGradNorm taken in (norm=1) against ClipGradNorm between the two, its
// norm too: an infinite max_norm (block by block), one that scales and a
// negative one (the whole gradient first), gated steps that run and skip,
// and a product that gemm splits along its shared dimension (made whole).
func TestUpdateProductMatchesMatMulGradBThenUpdate(t *testing.T) {
	yes, no := true, false
	inf := float32(math.Inf(1))
	cases := []productCase{
		{name: "sgd", aShape: []int{2, 6, 37}, cols: 11},
		{name: "sgd-momentum-blocks", aShape: []int{2, 6, 37}, cols: 11, on: []string{"momentum"}, block: 5},
		{name: "sgd-momentum-first-rows", aShape: []int{12, 37}, cols: 11, on: []string{"momentum"}, first: true, block: 1},
		{name: "sgd-nesterov-wd", aShape: []int{3, 2, 4, 40}, cols: 13, on: []string{"momentum", "nesterov"}, wd: true, block: 7},
		{name: "sgd-maximize", aShape: []int{9, 40}, cols: 13, on: []string{"momentum", "maximize"}, block: 3},
		{name: "sgd-parallel", aShape: []int{4, 16, 700}, cols: 300, on: []string{"momentum"}, block: 64},
		{name: "adam-l2", aShape: []int{2, 6, 37}, cols: 11, adam: true, wd: true, block: 4},
		{name: "adamw-amsgrad", aShape: []int{2, 6, 37}, cols: 11, adam: true, on: []string{"decoupled", "amsgrad"}, block: 6},
		{name: "adam-maximize-parallel", aShape: []int{16, 700}, cols: 300, adam: true, on: []string{"maximize", "decoupled"}, block: 100},
		{name: "norm-inf", aShape: []int{2, 6, 37}, cols: 11, on: []string{"momentum"}, norm: inf, block: 5},
		{name: "norm-clips", aShape: []int{2, 6, 37}, cols: 11, on: []string{"momentum"}, wd: true, norm: 0.5, block: 5},
		{name: "norm-negative", aShape: []int{8, 37}, cols: 11, on: []string{"maximize"}, norm: -1, block: 5},
		{name: "adam-norm-inf-parallel", aShape: []int{16, 700}, cols: 300, adam: true, on: []string{"decoupled"}, norm: inf, block: 64},
		{name: "gated-run", aShape: []int{2, 6, 37}, cols: 11, on: []string{"momentum"}, skip: &no, block: 5},
		{name: "gated-skip", aShape: []int{2, 6, 37}, cols: 11, on: []string{"momentum"}, skip: &yes, block: 5},
		{name: "norm-inf-gated-skip", aShape: []int{2, 6, 37}, cols: 11, adam: true, norm: inf, skip: &yes, block: 5},
		// A product split along its shared dimension (4096 rows of the
		// batch for a 40×40 X) is made whole, as MatMulGradB makes it.
		{name: "shared-split-whole", aShape: []int{4096, 40}, cols: 40, on: []string{"momentum"}, block: 3},
		{name: "shared-split-whole-norm", aShape: []int{4096, 40}, cols: 40, adam: true, norm: inf, block: 3},
	}
	rng := rand.New(rand.NewPCG(15, 16))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.block > 0 {
				old := productBlockBytes
				productBlockBytes = c.block * c.cols * 4
				defer func() { productBlockBytes = old }()
			}
			fused, plain, start := runProduct(t, rng, c)
			for i := range fused {
				assert.Equal(t, bitsOf32(plain[i]), bitsOf32(fused[i]), "output %d", i)
			}
			x := fused[0]
			if c.norm != 0 {
				x = fused[1] // after the norm
			}
			if c.skip != nil && *c.skip {
				assert.Equal(t, bitsOf32(start), bitsOf32(x), "a skipped step leaves X")
			} else {
				assert.NotEqual(t, bitsOf32(start), bitsOf32(x), "the step changed X")
			}
		})
	}
}

// runProduct runs two steps of c's fused node and of MatMulGradB, then
// ClipGradNorm with a max_norm, then the update (the graph the fusion
// replaces) from the same start, and returns both last outputs (the norm,
// if any, first) and X's start.
func runProduct(t *testing.T, rng *rand.Rand, c productCase) (fused, plain []*graph.Tensor, start *graph.Tensor) {
	t.Helper()
	k := c.aShape[len(c.aShape)-1]
	attrs := map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}
	for _, a := range c.on {
		attrs[a] = graph.IntAttr(a, 1)
	}
	if c.skip != nil {
		attrs["gated"] = graph.IntAttr("gated", 1)
	}
	flag := func(on bool) float32 {
		if on {
			return 1
		}
		return 0
	}
	op, fop := graph.SGDUpdateOp, graph.SGDUpdateProductOp
	consts := graph.FromFloat32([]float32{0.9, 0.75}, 2)
	hyper := graph.FromFloat32([]float32{-0.125, 0.01 * flag(c.wd), flag(c.first)}, 1, 3)
	var bufs []string
	if attrs["momentum"] != nil {
		bufs = []string{"b"}
	}
	if c.adam {
		op, fop = graph.AdamUpdateOp, graph.AdamUpdateProductOp
		consts = graph.FromFloat32([]float32{0.9, 0.999, 0.1, 0.001, 1e-8}, 5)
		hyper = graph.FromFloat32([]float32{-0.01, 0.03, 0.01, 0.9999, flag(c.wd)}, 1, 5)
		bufs = []string{"m", "v"}
		if attrs["amsgrad"] != nil {
			bufs = append(bufs, "mx")
		}
	}
	lead, leadNames := []*graph.Tensor{consts, hyper}, []string{"c", "h"}
	if c.skip != nil {
		lead, leadNames = append(lead, graph.FromBool([]bool{*c.skip})), append(leadNames, "skip")
	}
	outs := append([]string{"x1"}, bufs...)
	fattrs, fouts, fnames := attrs, outs, append([]string{}, leadNames...)
	maxNorm := graph.Scalar(graph.Float32, float64(c.norm))
	if c.norm != 0 {
		fattrs = map[string]*graph.Attr{"norm": graph.IntAttr("norm", 1)}
		for k, v := range attrs {
			fattrs[k] = v
		}
		fouts = append([]string{"norm"}, outs...)
		fnames = append(fnames, "max")
	}
	fn := &graph.Node{Name: "fused", OpType: fop, Domain: graph.InternalDomain,
		Inputs: append(append(fnames, "a", "x", "dy"), bufs...), Outputs: fouts, Attrs: fattrs}
	pn := &graph.Node{Name: "plain", OpType: op, Domain: graph.InternalDomain,
		Inputs: append(append(append([]string{}, leadNames...), "x", "g"), bufs...), Outputs: outs, Attrs: attrs}
	gn := &graph.Node{Name: "gb", OpType: "MatMulGradB", Domain: graph.InternalDomain, Inputs: []string{"dy", "a", "x"}, Outputs: []string{"g"}}
	cn := &graph.Node{Name: "clip", OpType: graph.ClipGradNormOp, Domain: graph.InternalDomain, Inputs: []string{"max", "g"}, Outputs: []string{"norm", "g1"},
		Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}
	binds := []*kern.Binding{{}, {}, {}, {}}
	for i, n := range []*graph.Node{fn, pn, gn, cn} {
		kern.Bind(n, binds[i])
		defer kern.Unbind(n)
	}
	gb, ok := kern.Lookup(graph.InternalDomain, "MatMulGradB", 17)
	require.True(t, ok)
	update := sgdUpdate
	if c.adam {
		update = adamUpdate
	}
	state := []*graph.Tensor{randTensor(rng, k, c.cols)}
	for range bufs {
		b := randTensor(rng, k, c.cols)
		for i, v := range b.Float32s() {
			b.Float32s()[i] = v * v // a second moment is not negative
		}
		state = append(state, b)
	}
	start = state[0]
	fused, plain = make([]*graph.Tensor, len(state)), make([]*graph.Tensor, len(state))
	for i, s := range state {
		fused[i], plain[i] = s.Clone(), s.Clone()
	}
	var fnorm, pnorm *graph.Tensor
	ctx := &kern.Context{InPlace: true}
	dyShape := append(append([]int{}, c.aShape[:len(c.aShape)-1]...), c.cols)
	for range 2 {
		a, dy := randTensor(rng, c.aShape...), randTensor(rng, dyShape...)
		in := append([]*graph.Tensor{}, lead...)
		if c.norm != 0 {
			in = append(in, maxNorm)
		}
		out, err := updateProduct(ctx, fn, append(append(in, a, fused[0], dy), fused[1:]...))
		require.NoError(t, err)
		if c.norm != 0 {
			fnorm, out = out[0], out[1:]
		}
		copy(fused, out)

		g, err := gb.Fn(&kern.Context{}, gn, []*graph.Tensor{dy, a, plain[0]})
		require.NoError(t, err)
		if c.norm != 0 {
			clipped, err := clipGradNorm(ctx, cn, []*graph.Tensor{maxNorm, g[0]})
			require.NoError(t, err)
			pnorm, g = clipped[0], clipped[1:]
		}
		out, err = update(ctx, pn, append(append(append([]*graph.Tensor{}, lead...), plain[0], g[0]), plain[1:]...))
		require.NoError(t, err)
		copy(plain, out)
	}
	runtime.KeepAlive(binds)
	if c.norm != 0 {
		fused, plain = append([]*graph.Tensor{fnorm}, fused...), append([]*graph.Tensor{pnorm}, plain...)
	}
	return fused, plain, start
}

// TestUpdateProductErrors: operands of the wrong shape or dtype are errors
// that name the input.
func TestUpdateProductErrors(t *testing.T) {
	n := &graph.Node{Name: "sp", OpType: graph.SGDUpdateProductOp, Domain: graph.InternalDomain,
		Inputs: []string{"c", "h", "a", "x", "dy"}, Outputs: []string{"x1"},
		Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}
	ctx := &kern.Context{InPlace: true}
	bind := &kern.Binding{}
	kern.Bind(n, bind)
	defer kern.Unbind(n)
	c := graph.FromFloat32([]float32{0, 1}, 2)
	h := graph.FromFloat32([]float32{-0.1, 0, 0}, 1, 3)
	x := graph.Zeros(graph.Float32, 4, 3)
	for _, tc := range []struct {
		a, x, dy *graph.Tensor
		want     string
	}{
		{graph.Zeros(graph.Float32, 2, 5), x, graph.Zeros(graph.Float32, 2, 3), "input 2 (A) must be float32 [..., m, 4]"},
		{graph.Zeros(graph.Float32, 2, 4), x, graph.Zeros(graph.Float32, 3, 3), "dY has shape [3 3], want A's rows [2] then X's columns (3)"},
		{graph.Zeros(graph.Float32, 2, 4), graph.Zeros(graph.Float32, 4, 3, 1), graph.Zeros(graph.Float32, 2, 3), "input 3 (X) must be a float32 matrix"},
		{graph.Zeros(graph.Float32, 2, 4), x, graph.Zeros(graph.Float64, 2, 3), "dY has shape"},
	} {
		_, err := updateProduct(ctx, n, []*graph.Tensor{c, h, tc.a, tc.x, tc.dy})
		require.Error(t, err)
		assert.Contains(t, err.Error(), tc.want)
	}
	runtime.KeepAlive(bind)
}
