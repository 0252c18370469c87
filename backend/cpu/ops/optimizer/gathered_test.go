package optimizer

import (
	"math"
	"math/rand/v2"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend/cpu/kern"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu/ops/gradient" // GatherGrad
	"github.com/onnxtrain/onnxtrain/graph"
)

// gatheredCase is one SGDUpdateGathered set-up: the table's shape, the
// indices, and the update's attributes and hyper row.
type gatheredCase struct {
	name                         string
	shape                        []int
	idx                          []int64
	idxShape                     []int
	momentum, nesterov, maximize bool
	first                        bool
	wd                           float32
	skip                         *bool
	// norm: the per-tensor ClipGradNorm with this max_norm taken in
	// (norm=1); 0 for none.
	norm float32
}

// runGathered updates copies of x and b with SGDUpdateGathered and with
// GatherGrad followed by SGDUpdate (the graph the fusion replaces), one
// step for each of dys (the nodes bound, so that their state carries from
// step to step as in a program), and returns both results: the table and,
// with momentum, the buffer.
func runGathered(t *testing.T, c gatheredCase, x, b *graph.Tensor, dys []*graph.Tensor, ind *graph.Tensor) (fused, plain []*graph.Tensor) {
	t.Helper()
	attrs := map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}
	set := func(name string, on bool) {
		if on {
			attrs[name] = graph.IntAttr(name, 1)
		}
	}
	set("momentum", c.momentum)
	set("nesterov", c.nesterov)
	set("maximize", c.maximize)
	set("gated", c.skip != nil)
	first := float32(0)
	if c.first {
		first = 1
	}
	consts := graph.FromFloat32([]float32{0.9, 0.75}, 2)
	hyper := graph.FromFloat32([]float32{-0.125, c.wd, first}, 1, 3)
	lead := []*graph.Tensor{consts, hyper}
	leadNames := []string{"c", "h"}
	if c.skip != nil {
		lead = append(lead, graph.FromBool([]bool{*c.skip}))
		leadNames = append(leadNames, "skip")
	}
	outs := []string{"x1"}
	if c.momentum {
		outs = append(outs, "b1")
	}
	fattrs, fouts := attrs, outs
	maxNorm := graph.Scalar(graph.Float32, float64(c.norm))
	if c.norm != 0 {
		fattrs = map[string]*graph.Attr{"norm": graph.IntAttr("norm", 1)}
		for k, v := range attrs {
			fattrs[k] = v
		}
		fouts = append([]string{"norm"}, outs...)
	}
	ctx := &kern.Context{InPlace: true}

	// Fused: consts, hyper[, skip], indices, X, dY[, B].
	fnames := append([]string{}, leadNames...)
	if c.norm != 0 {
		fnames = append(fnames, "max")
	}
	fnames = append(fnames, "ind", "x", "dy")
	// Plain: G = GatherGrad(dY, X, indices), then SGDUpdate.
	pnames := append(append([]string{}, leadNames...), "x", "g")
	if c.momentum {
		fnames, pnames = append(fnames, "b"), append(pnames, "b")
	}
	fn := &graph.Node{Name: "fused", OpType: graph.SGDUpdateGatheredOp, Domain: graph.InternalDomain, Inputs: fnames, Outputs: fouts, Attrs: fattrs}
	cn := &graph.Node{Name: "clip", OpType: graph.ClipGradNormOp, Domain: graph.InternalDomain, Inputs: []string{"max", "g"}, Outputs: []string{"norm", "g1"},
		Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}
	pn := &graph.Node{Name: "plain", OpType: graph.SGDUpdateOp, Domain: graph.InternalDomain, Inputs: pnames, Outputs: outs, Attrs: attrs}
	ggn := &graph.Node{Name: "gg", OpType: "GatherGrad", Domain: graph.InternalDomain, Inputs: []string{"dy", "x", "ind"}, Outputs: []string{"g"},
		Attrs: map[string]*graph.Attr{"axis": graph.IntAttr("axis", 0)}}
	binds := []*kern.Binding{{}, {}, {}, {}}
	for i, n := range []*graph.Node{fn, pn, ggn, cn} {
		kern.Bind(n, binds[i])
		defer kern.Unbind(n)
	}
	gg, ok := kern.Lookup(graph.InternalDomain, "GatherGrad", 17)
	require.True(t, ok)
	fused = []*graph.Tensor{x.Clone(), b.Clone(), nil}
	plain = []*graph.Tensor{x.Clone(), b.Clone(), nil}
	for _, dy := range dys {
		in := append([]*graph.Tensor{}, lead...)
		if c.norm != 0 {
			in = append(in, maxNorm)
		}
		in = append(in, ind, fused[0], dy)
		if c.momentum {
			in = append(in, fused[1])
		}
		out, err := updateGathered(ctx, fn, in)
		require.NoError(t, err)
		if c.norm != 0 {
			fused[2], out = out[0], out[1:]
		}
		copy(fused, out)

		g, err := gg.Fn(&kern.Context{}, ggn, []*graph.Tensor{dy, plain[0], ind})
		require.NoError(t, err)
		if c.norm != 0 {
			clipped, err := clipGradNorm(ctx, cn, []*graph.Tensor{maxNorm, g[0]})
			require.NoError(t, err)
			plain[2], g = clipped[0], clipped[1:]
		}
		in = append(append([]*graph.Tensor{}, lead...), plain[0], g[0])
		if c.momentum {
			in = append(in, plain[1])
		}
		out, err = sgdUpdate(ctx, pn, in)
		require.NoError(t, err)
		copy(plain, out)
	}
	runtime.KeepAlive(binds)
	keep := func(ts []*graph.Tensor) []*graph.Tensor {
		out := ts[:1]
		if c.momentum {
			out = append(out, ts[1])
		}
		if c.norm != 0 {
			out = append(out, ts[2]) // the last step's norm
		}
		return out
	}
	return keep(fused), keep(plain)
}

func randTensor(rng *rand.Rand, shape ...int) *graph.Tensor {
	t := graph.Zeros(graph.Float32, shape...)
	for i, v := range t.Float32s() {
		_ = v
		t.Float32s()[i] = float32(rng.NormFloat64())
	}
	return t
}

// TestSGDUpdateGatheredMatchesGatherGradThenSGDUpdate: SGDUpdateGathered
// gives GatherGrad-then-SGDUpdate's bits for the table and the momentum
// buffer: repeated and negative indices, rows no index names, every SGD
// mode (plain, momentum and its first step, Nesterov, maximize, weight
// decay), rows whose width is no multiple of the vector width, a table
// large enough to be updated on every core in chunks of rows, signed zeros
// in the table and the buffer, and a gated update that skips; with the
// per-tensor ClipGradNorm taken in (norm=1), against ClipGradNorm between
// the two, its norm too: an infinite max_norm, one that scales, a
// negative one (the zeros turn into −0), a skipped step; two steps each,
// the nodes keeping their state between them.
func TestSGDUpdateGatheredMatchesGatherGradThenSGDUpdate(t *testing.T) {
	yes, no := true, false
	cases := []gatheredCase{
		{name: "plain", shape: []int{50, 12}, idx: []int64{3, 7, 3, -1, 0, 49, 7, 3}, idxShape: []int{2, 4}},
		{name: "momentum", shape: []int{50, 12}, idx: []int64{3, 7, 3, -1, 0, 49, 7, 3}, idxShape: []int{8}, momentum: true},
		{name: "momentum-first", shape: []int{50, 12}, idx: []int64{3, 7, 3, -50}, idxShape: []int{4}, momentum: true, first: true},
		{name: "nesterov-wd", shape: []int{40, 13}, idx: []int64{1, 1, 1, 39, 20}, idxShape: []int{5}, momentum: true, nesterov: true, wd: 0.01},
		{name: "maximize", shape: []int{40, 13}, idx: []int64{1, 5, -2}, idxShape: []int{3}, momentum: true, maximize: true},
		{name: "maximize-plain-wd", shape: []int{40, 5}, idx: []int64{1, 5, -2}, idxShape: []int{3}, maximize: true, wd: 0.02},
		{name: "rank3-table", shape: []int{30, 3, 5}, idx: []int64{29, 0, 29, 4}, idxShape: []int{2, 2}, momentum: true},
		{name: "parallel", shape: []int{5000, 40}, idx: []int64{4999, 17, 17, 2500, -3, 0, 1234, 17}, idxShape: []int{8}, momentum: true},
		{name: "gated-skip", shape: []int{20, 8}, idx: []int64{1, 2}, idxShape: []int{2}, momentum: true, skip: &yes},
		{name: "gated-run", shape: []int{20, 8}, idx: []int64{1, 2, 1}, idxShape: []int{3}, momentum: true, skip: &no},
		{name: "norm-inf", shape: []int{50, 12}, idx: []int64{3, 7, 3, -1}, idxShape: []int{4}, momentum: true, norm: float32(math.Inf(1))},
		{name: "norm-clips", shape: []int{50, 12}, idx: []int64{3, 7, 3, -1}, idxShape: []int{4}, momentum: true, wd: 0.01, norm: 0.5},
		{name: "norm-negative", shape: []int{50, 12}, idx: []int64{3, 7}, idxShape: []int{2}, maximize: true, norm: -1},
		{name: "norm-parallel", shape: []int{5000, 40}, idx: []int64{4999, 17, 17, 2500, -3, 0}, idxShape: []int{6}, momentum: true, norm: 2},
		{name: "norm-gated-skip", shape: []int{20, 8}, idx: []int64{1, 2}, idxShape: []int{2}, momentum: true, skip: &yes, norm: 0.5},
	}
	rng := rand.New(rand.NewPCG(11, 12))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			x := randTensor(rng, c.shape...)
			b := randTensor(rng, c.shape...)
			// Signed zeros where the arithmetic keeps or drops them.
			x.Float32s()[0], x.Float32s()[1] = float32(math.Copysign(0, -1)), 0
			b.Float32s()[0], b.Float32s()[2] = float32(math.Copysign(0, -1)), float32(math.Copysign(0, -1))
			dyShape := append(append([]int{}, c.idxShape...), c.shape[1:]...)
			dys := []*graph.Tensor{randTensor(rng, dyShape...), randTensor(rng, dyShape...)}
			ind := graph.FromInt64(c.idx, c.idxShape...)
			fused, plain := runGathered(t, c, x, b, dys, ind)
			require.Len(t, fused, len(plain))
			for i := range fused {
				assert.Equal(t, bitsOf32(plain[i]), bitsOf32(fused[i]), "output %d", i)
			}
			if c.skip != nil && *c.skip {
				assert.Equal(t, bitsOf32(x), bitsOf32(fused[0]), "a skipped step leaves the table")
			} else {
				assert.NotEqual(t, bitsOf32(x), bitsOf32(fused[0]), "the step changed the table")
			}
		})
	}
}

func bitsOf32(t *graph.Tensor) []uint32 {
	out := make([]uint32, t.Size())
	for i, v := range t.Float32s() {
		out[i] = math.Float32bits(v)
	}
	return out
}

// TestSGDUpdateGatheredErrors: an index outside the table, a dY whose
// shape is not the indices' then the table's rows, a missing operand and
// a float index are errors that name what is wrong; a failed run leaves
// no row marked for the next (the same node then runs correctly).
func TestSGDUpdateGatheredErrors(t *testing.T) {
	f := func(v ...float32) *graph.Tensor { return graph.FromFloat32(v, len(v)) }
	n := &graph.Node{Name: "sg", OpType: graph.SGDUpdateGatheredOp, Domain: graph.InternalDomain,
		Inputs: []string{"c", "h", "ind", "x", "dy"}, Outputs: []string{"x1"},
		Attrs: map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}}
	ctx := &kern.Context{InPlace: true}
	bind := &kern.Binding{} // the node keeps its state from run to run, as in a program
	kern.Bind(n, bind)
	defer kern.Unbind(n)
	defer runtime.KeepAlive(bind)
	consts := f(0, 1)
	hyper := graph.FromFloat32([]float32{-1, 0, 0}, 1, 3)
	table := func() *graph.Tensor { return graph.FromFloat32([]float32{1, 2, 3, 4, 5, 6}, 3, 2) }

	_, err := updateGathered(ctx, n, []*graph.Tensor{consts, hyper, graph.FromInt64([]int64{0, 3}, 2), table(), graph.FromFloat32([]float32{7, 7, 7, 7}, 2, 2)})
	assert.ErrorContains(t, err, "index 3 is out of range for an axis of size 3")
	_, err = updateGathered(ctx, n, []*graph.Tensor{consts, hyper, graph.FromInt64([]int64{0, -4}, 2), table(), graph.Zeros(graph.Float32, 2, 2)})
	assert.ErrorContains(t, err, "index -4 is out of range")
	_, err = updateGathered(ctx, n, []*graph.Tensor{consts, hyper, graph.FromInt64([]int64{0, 1}, 2), table(), graph.Zeros(graph.Float32, 2, 3)})
	assert.ErrorContains(t, err, "dY has shape [2 3], want [2 2]")
	_, err = updateGathered(ctx, n, []*graph.Tensor{consts, hyper, f(0, 1), table(), graph.Zeros(graph.Float32, 2, 2)})
	assert.ErrorContains(t, err, "(indices) must be an integer tensor")
	_, err = updateGathered(ctx, n, []*graph.Tensor{consts, hyper, graph.FromInt64([]int64{0}, 1), table()})
	assert.ErrorContains(t, err, "has 4 inputs, want 5")

	// After the failed runs above (the first had summed a row before its
	// bad index), rows 2 and 0 get their own gradients only: x[r] -= the
	// dY rows that name r, summed.
	x := table()
	dy := graph.FromFloat32([]float32{1, 1, 10, 10, 100, 100}, 3, 2)
	out, err := updateGathered(ctx, n, []*graph.Tensor{consts, hyper, graph.FromInt64([]int64{2, 0, 2}, 3), x, dy})
	require.NoError(t, err)
	assert.Equal(t, []float32{-9, -8, 3, 4, -96, -95}, out[0].Float32s())
}

// adamGatheredCase is one AdamUpdateGathered set-up.
type adamGatheredCase struct {
	name                         string
	shape                        []int
	idx                          []int64
	decoupled, amsgrad, maximize bool
	l2                           bool
	skip                         *bool
}

// TestAdamUpdateGatheredMatchesGatherGradThenAdamUpdate: AdamUpdateGathered
// gives GatherGrad-then-AdamUpdate's bits for the table and its moments
// (and the running maximum with amsgrad): Adam with L2 decay, AdamW,
// amsgrad, maximize, a table updated on every core, a gated skip; two
// steps each.
func TestAdamUpdateGatheredMatchesGatherGradThenAdamUpdate(t *testing.T) {
	yes := true
	cases := []adamGatheredCase{
		{name: "adam-l2", shape: []int{50, 12}, idx: []int64{3, 7, 3, -1, 0, 49}, l2: true},
		{name: "adamw", shape: []int{40, 13}, idx: []int64{1, 1, 39, 20}, decoupled: true},
		{name: "adamw-amsgrad", shape: []int{40, 13}, idx: []int64{1, 5, -2, 5}, decoupled: true, amsgrad: true},
		{name: "adam-maximize", shape: []int{30, 3, 5}, idx: []int64{29, 0, 29}, maximize: true},
		{name: "parallel", shape: []int{5000, 40}, idx: []int64{4999, 17, 17, 2500, -3, 0}, decoupled: true},
		{name: "gated-skip", shape: []int{20, 8}, idx: []int64{1, 2}, decoupled: true, skip: &yes},
	}
	rng := rand.New(rand.NewPCG(13, 14))
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			attrs := map[string]*graph.Attr{"tensors": graph.IntAttr("tensors", 1)}
			for name, on := range map[string]bool{"decoupled": c.decoupled, "amsgrad": c.amsgrad, "maximize": c.maximize, "gated": c.skip != nil} {
				if on {
					attrs[name] = graph.IntAttr(name, 1)
				}
			}
			consts := graph.FromFloat32([]float32{0.9, 0.999, 0.1, 0.001, 1e-8}, 5)
			l2 := float32(0)
			if c.l2 {
				l2 = 1
			}
			hyper := graph.FromFloat32([]float32{-0.01, 0.03, 0.01, 0.9999, l2}, 1, 5)
			lead, leadNames := []*graph.Tensor{consts, hyper}, []string{"c", "h"}
			if c.skip != nil {
				lead, leadNames = append(lead, graph.FromBool([]bool{*c.skip})), append(leadNames, "skip")
			}
			bufs := []string{"m", "v"}
			if c.amsgrad {
				bufs = append(bufs, "mx")
			}
			outs := append([]string{"x1"}, bufs...)
			fn := &graph.Node{Name: "fused", OpType: graph.AdamUpdateGatheredOp, Domain: graph.InternalDomain,
				Inputs: append(append(append([]string{}, leadNames...), "ind", "x", "dy"), bufs...), Outputs: outs, Attrs: attrs}
			pn := &graph.Node{Name: "plain", OpType: graph.AdamUpdateOp, Domain: graph.InternalDomain,
				Inputs: append(append(append([]string{}, leadNames...), "x", "g"), bufs...), Outputs: outs, Attrs: attrs}
			ggn := &graph.Node{Name: "gg", OpType: "GatherGrad", Domain: graph.InternalDomain, Inputs: []string{"dy", "x", "ind"}, Outputs: []string{"g"},
				Attrs: map[string]*graph.Attr{"axis": graph.IntAttr("axis", 0)}}
			binds := []*kern.Binding{{}, {}, {}}
			for i, n := range []*graph.Node{fn, pn, ggn} {
				kern.Bind(n, binds[i])
				defer kern.Unbind(n)
			}
			gg, ok := kern.Lookup(graph.InternalDomain, "GatherGrad", 17)
			require.True(t, ok)
			start := []*graph.Tensor{randTensor(rng, c.shape...), randTensor(rng, c.shape...)}
			v := randTensor(rng, c.shape...)
			for i, x := range v.Float32s() {
				v.Float32s()[i] = x * x // a second moment is not negative
			}
			start = append(start, v)
			if c.amsgrad {
				start = append(start, v.Clone())
			}
			fused, plain := make([]*graph.Tensor, len(start)), make([]*graph.Tensor, len(start))
			for i, s := range start {
				fused[i], plain[i] = s.Clone(), s.Clone()
			}
			ind := graph.FromInt64(c.idx, len(c.idx))
			ctx := &kern.Context{InPlace: true}
			for range 2 {
				dy := randTensor(rng, append([]int{len(c.idx)}, c.shape[1:]...)...)
				out, err := updateGathered(ctx, fn, append(append(append([]*graph.Tensor{}, lead...), ind, fused[0], dy), fused[1:]...))
				require.NoError(t, err)
				copy(fused, out)
				g, err := gg.Fn(&kern.Context{}, ggn, []*graph.Tensor{dy, plain[0], ind})
				require.NoError(t, err)
				out, err = adamUpdate(ctx, pn, append(append(append([]*graph.Tensor{}, lead...), plain[0], g[0]), plain[1:]...))
				require.NoError(t, err)
				copy(plain, out)
				for i := range fused {
					assert.Equal(t, bitsOf32(plain[i]), bitsOf32(fused[i]), "output %d", i)
				}
			}
			runtime.KeepAlive(binds)
			if c.skip != nil {
				assert.Equal(t, bitsOf32(start[0]), bitsOf32(fused[0]), "a skipped step leaves the table")
			} else {
				assert.NotEqual(t, bitsOf32(start[0]), bitsOf32(fused[0]), "the step changed the table")
			}
		})
	}
}
