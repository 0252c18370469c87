package optim

import (
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"runtime"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

const goldenSteps = 5

var paramNames = []string{"w", "b", "s"}

// noGrad mirrors NO_GRAD in testdata/make_golden.py.
func noGrad(name string, step int) bool { return name == "b" && step == 2 }

type goldenCase struct {
	make func() (Optimizer, error)
	// group of each param (default 0)
	groups map[string]int
	// byDecay assigns the groups with GroupByDecay instead
	byDecay bool
	sched   Schedule
}

// goldenCases mirrors CASES in testdata/make_golden.py.
var goldenCases = map[string]goldenCase{
	"sgd_plain": {make: func() (Optimizer, error) { return NewSGD(SGDConfig{LR: 0.1}) }},
	"sgd_momentum": {make: func() (Optimizer, error) {
		return NewSGD(SGDConfig{LR: 0.05, Momentum: 0.9, Dampening: 0.1, WeightDecay: 0.01, Groups: []Group{{WeightDecay: 0.01}}})
	}},
	"sgd_nesterov": {make: func() (Optimizer, error) {
		return NewSGD(SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 0.001, Groups: []Group{{WeightDecay: 0.001}}})
	}},
	"sgd_groups": {
		make: func() (Optimizer, error) {
			return NewSGD(SGDConfig{LR: 0.05, Momentum: 0.8, WeightDecay: 0.02,
				Groups: []Group{{WeightDecay: 0.02}, {LRScale: 0.5}}})
		},
		groups: map[string]int{"b": 1, "s": 1},
	},
	"adam": {make: func() (Optimizer, error) { return NewAdam(DefaultAdamConfig(1e-2)) }},
	"adam_wd": {make: func() (Optimizer, error) {
		c := DefaultAdamConfig(1e-2)
		c.WeightDecay = 0.05
		c.Groups = []Group{{WeightDecay: 0.05}}
		return NewAdam(c)
	}},
	"adam_amsgrad": {make: func() (Optimizer, error) {
		return NewAdam(AdamConfig{LR: 1e-2, Beta1: 0.8, Beta2: 0.99, Eps: 1e-6, AMSGrad: true})
	}},
	"adamw": {make: func() (Optimizer, error) {
		c := DefaultAdamWConfig(1e-2)
		c.WeightDecay = 0.1
		c.Groups = []Group{{WeightDecay: 0.1}}
		return NewAdamW(c)
	}},
	"adamw_groups": {
		// GroupByDecay puts the rank-1 b and s in group 1.
		make: func() (Optimizer, error) {
			c := DefaultAdamWConfig(1e-2)
			c.WeightDecay = 0.1
			c.Groups = []Group{{WeightDecay: 0.1}, {LRScale: 0.5}}
			return NewAdamW(c)
		},
		byDecay: true,
	},
	"adam_sched": {
		make:  func() (Optimizer, error) { return NewAdam(DefaultAdamConfig(3e-2)) },
		sched: LinearWarmupDecay{Base: 3e-2, WarmupSteps: 2, TotalSteps: 5},
	},
}

func loadNPZ(t *testing.T, path string) map[string]*graph.Tensor {
	t.Helper()
	m, err := tensorio.ReadNPZ(path)
	require.NoError(t, err)
	require.NotEmpty(t, m)
	return m
}

func newParams(t *testing.T, gold map[string]*graph.Tensor, c goldenCase) []*Param {
	var ps []*Param
	for _, n := range paramNames {
		v := gold["init/"+n]
		require.NotNil(t, v, n)
		ps = append(ps, &Param{Name: n, Value: v.Clone(), Group: c.groups[n]})
	}
	if c.byDecay {
		GroupByDecay(ps, nil)
		require.Equal(t, []int{0, 1, 1}, []int{ps[0].Group, ps[1].Group, ps[2].Group})
	}
	return ps
}

func setGrads(t *testing.T, ps []*Param, gold map[string]*graph.Tensor, step int) {
	for _, p := range ps {
		if noGrad(p.Name, step) {
			p.Grad = nil
			continue
		}
		g := gold[fmt.Sprintf("grad/%d/%s", step, p.Name)]
		require.NotNil(t, g)
		p.Grad = g.Clone()
	}
}

// maxRelDiff returns the largest |a-b|/max(|b|, 1e-6) and the number of
// elements whose bits differ.
func maxRelDiff(a, b []float32) (float64, int) {
	var worst float64
	differ := 0
	for i := range a {
		if math.Float32bits(a[i]) != math.Float32bits(b[i]) {
			differ++
		}
		d := math.Abs(float64(a[i])-float64(b[i])) / math.Max(math.Abs(float64(b[i])), 1e-6)
		if d > worst || math.IsNaN(d) {
			worst = d
		}
	}
	return worst, differ
}

func runGolden(t *testing.T, name string, c goldenCase, gold map[string]*graph.Tensor, from int, opt Optimizer, ps []*Param) {
	for step := from; step < goldenSteps; step++ {
		if c.sched != nil {
			opt.SetLR(c.sched.LR(step))
		}
		setGrads(t, ps, gold, step)
		require.NoError(t, opt.Step(ps))
		for _, p := range ps {
			want := gold[fmt.Sprintf("%s/step%d/%s", name, step, p.Name)]
			require.NotNil(t, want)
			require.Equal(t, want.Shape, p.Value.Shape)
			// The README promises bit-identical optimizer arithmetic.
			rel, differ := maxRelDiff(p.Value.Float32s(), want.Float32s())
			assert.Zero(t, differ, "%s step %d param %s: %d of %d elements differ from torch's bits (max rel %.3g)", name, step, p.Name, differ, len(want.Float32s()), rel)
		}
	}
}

func TestOptimizersMatchTorch(t *testing.T) {
	gold := loadNPZ(t, "testdata/optim_golden.npz")
	cases := map[string]bool{}
	for k := range gold {
		if c, _, ok := strings.Cut(k, "/step0/"); ok {
			cases[c] = true
		}
	}
	require.Len(t, cases, len(goldenCases), "cases in the golden file: %v", cases)
	for name, c := range goldenCases {
		t.Run(name, func(t *testing.T) {
			require.True(t, cases[name], "no golden values for %s", name)
			opt, err := c.make()
			require.NoError(t, err)
			ps := newParams(t, gold, c)
			runGolden(t, name, c, gold, 0, opt, ps)

			// The final state matches torch's optimizer state.
			st := opt.State()
			n := 0
			for k, want := range gold {
				rest, ok := strings.CutPrefix(k, name+"/state/")
				if !ok {
					continue
				}
				n++
				got := st[rest]
				require.NotNil(t, got, "state %s", rest)
				if strings.HasSuffix(rest, "/step") {
					assert.Equal(t, int64(want.Float(0)), got.Int(0), rest)
					continue
				}
				rel, differ := maxRelDiff(got.Float32s(), want.Float32s())
				assert.Zero(t, differ, "state %s: %d elements differ from torch's bits (max rel %.3g)", rest, differ, rel)
			}
			if name != "sgd_plain" {
				assert.Positive(t, n, "torch has state for %s", name)
			}
			assert.Equal(t, int64(goldenSteps), st["step"].Int(0))
		})
	}
}

// TestResumeIsBitExact stops after 2 steps, moves the state into a fresh
// optimizer, and checks the last 3 steps give the same bits as 5 straight.
func TestResumeIsBitExact(t *testing.T) {
	gold := loadNPZ(t, "testdata/optim_golden.npz")
	for _, name := range []string{"sgd_groups", "sgd_nesterov", "adam_amsgrad", "adamw_groups", "adam_sched"} {
		t.Run(name, func(t *testing.T) {
			c := goldenCases[name]
			straight, err := c.make()
			require.NoError(t, err)
			ps1 := newParams(t, gold, c)
			for step := 0; step < goldenSteps; step++ {
				if c.sched != nil {
					straight.SetLR(c.sched.LR(step))
				}
				setGrads(t, ps1, gold, step)
				require.NoError(t, straight.Step(ps1))
			}

			first, err := c.make()
			require.NoError(t, err)
			ps2 := newParams(t, gold, c)
			for step := 0; step < 2; step++ {
				if c.sched != nil {
					first.SetLR(c.sched.LR(step))
				}
				setGrads(t, ps2, gold, step)
				require.NoError(t, first.Step(ps2))
			}
			st := first.State()
			resumed, err := c.make()
			require.NoError(t, err)
			require.NoError(t, resumed.LoadState(st))
			assert.Equal(t, first.LR(), resumed.LR())
			// Values are carried by the caller (the checkpoint holds them).
			for step := 2; step < goldenSteps; step++ {
				if c.sched != nil {
					resumed.SetLR(c.sched.LR(step))
				}
				setGrads(t, ps2, gold, step)
				require.NoError(t, resumed.Step(ps2))
			}
			for i := range ps1 {
				assert.Equal(t, ps1[i].Value.Float32s(), ps2[i].Value.Float32s(), ps1[i].Name)
			}
			assert.Equal(t, straight.State(), resumed.State())
		})
	}
}

func TestLoadStateErrors(t *testing.T) {
	gold := loadNPZ(t, "testdata/optim_golden.npz")
	opt, err := NewAdam(AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, AMSGrad: true})
	require.NoError(t, err)
	ps := newParams(t, gold, goldenCase{})
	setGrads(t, ps, gold, 0)
	require.NoError(t, opt.Step(ps))
	good := opt.State()
	require.Contains(t, good, "w/max_exp_avg_sq")

	edit := func(f func(m map[string]*graph.Tensor)) map[string]*graph.Tensor {
		m := map[string]*graph.Tensor{}
		for k, v := range good {
			m[k] = v.Clone()
		}
		f(m)
		return m
	}
	cases := map[string]struct {
		st   map[string]*graph.Tensor
		want string
	}{
		"missing exp_avg_sq": {edit(func(m map[string]*graph.Tensor) { delete(m, "w/exp_avg_sq") }), `"w/exp_avg_sq" is missing`},
		"missing step":       {edit(func(m map[string]*graph.Tensor) { delete(m, "b/step") }), `"b/step" is missing`},
		"missing global":     {edit(func(m map[string]*graph.Tensor) { delete(m, "step") }), `"step" is missing`},
		"wrong dtype": {edit(func(m map[string]*graph.Tensor) { m["s/exp_avg"] = graph.FromFloat64(make([]float64, 4), 4) }),
			"s/exp_avg must be float32"},
		"shape mismatch": {edit(func(m map[string]*graph.Tensor) { m["w/exp_avg"] = graph.Zeros(graph.Float32, 5, 3) }),
			"w/exp_avg has shape [5 3] but w/exp_avg_sq has [3 5]"},
		"unknown slot": {edit(func(m map[string]*graph.Tensor) { m["w/momentum_buffer"] = graph.Zeros(graph.Float32, 3, 5) }),
			`unexpected entry "w/momentum_buffer"`},
		"float step": {edit(func(m map[string]*graph.Tensor) { m["w/step"] = graph.FromFloat32([]float32{1}) }),
			"w/step must be an integer"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			fresh, err := NewAdam(AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, AMSGrad: true})
			require.NoError(t, err)
			err = fresh.LoadState(c.st)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrState)
			assert.Contains(t, err.Error(), c.want)
			assert.Empty(t, stateSlots(fresh.State()), "a failed load leaves the state alone")
		})
	}

	// A state whose shapes do not fit the params fails at Step, naming it.
	fresh, err := NewAdam(AdamConfig{LR: 1e-2, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, AMSGrad: true})
	require.NoError(t, err)
	bad := edit(func(m map[string]*graph.Tensor) {
		for _, s := range []string{"exp_avg", "exp_avg_sq", "max_exp_avg_sq"} {
			m["w/"+s] = graph.Zeros(graph.Float32, 15)
		}
	})
	require.NoError(t, fresh.LoadState(bad))
	before := ps[0].Value.Clone()
	err = fresh.Step(ps)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "state w/")
	assert.Contains(t, err.Error(), "has shape [15], parameter has shape [3 5]")
	assert.Equal(t, before.Float32s(), ps[0].Value.Float32s(), "a failed step updates nothing")

	sgd, err := NewSGD(SGDConfig{LR: 0.1})
	require.NoError(t, err)
	err = sgd.LoadState(map[string]*graph.Tensor{"step": int64Scalar(1), "lr": float64Scalar(0.1), "w/momentum_buffer": graph.Zeros(graph.Float32, 3, 5)})
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"w/momentum_buffer" given but momentum is 0`)
}

func stateSlots(st map[string]*graph.Tensor) []string {
	var ks []string
	for k := range st {
		if strings.Contains(k, "/") {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

func TestConfigValidation(t *testing.T) {
	_, err := NewSGD(SGDConfig{LR: 0.1, Nesterov: true})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Nesterov")
	_, err = NewSGD(SGDConfig{LR: 0.1, Nesterov: true, Momentum: 0.9, Dampening: 0.1})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "dampening")
	_, err = NewSGD(SGDConfig{LR: -1})
	assert.ErrorContains(t, err, "learning rate")
	_, err = NewAdam(AdamConfig{LR: 1e-3, Beta1: 1, Beta2: 0.999})
	assert.ErrorContains(t, err, "beta1")
	_, err = NewAdamW(AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: -0.1})
	assert.ErrorContains(t, err, "beta2")
	_, err = NewAdam(AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.99, Eps: -1})
	assert.ErrorContains(t, err, "epsilon")
	_, err = NewAdam(AdamConfig{LR: 1e-3, Groups: []Group{}})
	assert.ErrorContains(t, err, "Groups is empty")
}

func TestStepRejectsBadParams(t *testing.T) {
	opt, err := NewSGD(SGDConfig{LR: 0.1})
	require.NoError(t, err)
	v := graph.FromFloat32([]float32{1, 2, 3}, 3)
	cases := map[string]struct {
		ps   []*Param
		want string
	}{
		"grad shape": {[]*Param{{Name: "a", Value: v, Grad: graph.FromFloat32([]float32{1, 2, 3}, 1, 3)}}, `param "a": gradient shape [1 3] differs from value shape [3]`},
		"grad dtype": {[]*Param{{Name: "a", Value: v, Grad: graph.FromFloat64([]float64{1, 2, 3}, 3)}}, `param "a": gradient must be float32`},
		"duplicate":  {[]*Param{{Name: "a", Value: v}, {Name: "a", Value: v}}, `param "a" appears twice`},
		"group":      {[]*Param{{Name: "a", Value: v, Group: 2}}, `param "a": group 2 out of range (2 groups)`},
		"value":      {[]*Param{{Name: "a", Value: graph.FromInt64([]int64{1}, 1)}}, `param "a": value must be float32`},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			assert.ErrorContains(t, opt.Step(c.ps), c.want)
		})
	}
	assert.Equal(t, []float32{1, 2, 3}, v.Float32s())
}

func TestGroupByDecay(t *testing.T) {
	ps := []*Param{
		{Name: "conv.weight", Value: graph.Zeros(graph.Float32, 4, 3, 3, 3)},
		{Name: "conv.bias", Value: graph.Zeros(graph.Float32, 4)},
		{Name: "fc.weight", Value: graph.Zeros(graph.Float32, 10, 4)},
		{Name: "ln.weight_2d", Value: graph.Zeros(graph.Float32, 2, 4)},
		{Name: "temp", Value: graph.Zeros(graph.Float32)},
	}
	GroupByDecay(ps, NameContains("ln."))
	got := map[string]int{}
	for _, p := range ps {
		got[p.Name] = p.Group
	}
	assert.Equal(t, map[string]int{"conv.weight": 0, "conv.bias": 1, "fc.weight": 0, "ln.weight_2d": 1, "temp": 1}, got)

	// With the default groups, group 1 gets no weight decay: under AdamW
	// with zero gradients a no-decay param stays put, a decay param shrinks.
	opt, err := NewAdamW(DefaultAdamWConfig(0.1))
	require.NoError(t, err)
	w := &Param{Name: "w", Value: graph.FromFloat32([]float32{1, 1}, 1, 2), Grad: graph.Zeros(graph.Float32, 1, 2)}
	b := &Param{Name: "b", Value: graph.FromFloat32([]float32{1, 1}, 2), Grad: graph.Zeros(graph.Float32, 2)}
	GroupByDecay([]*Param{w, b}, nil)
	require.NoError(t, opt.Step([]*Param{w, b}))
	assert.Equal(t, []float32{1, 1}, b.Value.Float32s())
	assert.Equal(t, float32(1-0.1*0.01), w.Value.Float32s()[0])
}

func TestSetLRAndScale(t *testing.T) {
	o, err := NewSGD(SGDConfig{LR: 0.1, Groups: []Group{{}, {LRScale: 0.25}}})
	require.NoError(t, err)
	o.SetLR(0.4)
	assert.Equal(t, 0.4, o.LR())
	groups := o.(*SGD).Groups()
	assert.Equal(t, 0.4, groups[0].LR)
	assert.Equal(t, 0.1, groups[1].LR)
	p := &Param{Name: "p", Value: graph.FromFloat32([]float32{1}, 1), Grad: graph.FromFloat32([]float32{1}, 1), Group: 1}
	q := &Param{Name: "q", Value: graph.FromFloat32([]float32{1}, 1)} // no grad: skipped
	require.NoError(t, o.Step([]*Param{p, q}))
	assert.Equal(t, float32(0.9), p.Value.Float32s()[0])
	assert.Equal(t, float32(1), q.Value.Float32s()[0])
}

func TestPowInt(t *testing.T) {
	// Python: 0.9**4 == 0.6561, 0.9**5 == 0.5904900000000001 (Go's math.Pow
	// gives 0.6561000000000001 and 0.5904900000000002).
	assert.Equal(t, 0.6561, powInt(0.9, 4))
	assert.Equal(t, 0.5904900000000001, powInt(0.9, 5))
	assert.Equal(t, 1.0, powInt(0.999, 0))
	assert.Equal(t, 0.999, powInt(0.999, 1))
}

// TestSGDLargeStepIsExactAndSplitFree: a step large enough to be split
// over goroutines gives, for every element, exactly the single rounding of
// the exact value (big.Float) of what torch computes, for plain SGD and for
// momentum with weight decay; the update is the same whatever GOMAXPROCS.
func TestSGDLargeStepIsExactAndSplitFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 3<<16 + 123
	exact := func(a, b, c float32) float32 {
		p := new(big.Float).SetPrec(200).SetFloat64(float64(a))
		p.Mul(p, new(big.Float).SetPrec(200).SetFloat64(float64(b)))
		p.Add(p, new(big.Float).SetPrec(200).SetFloat64(float64(c)))
		f, _ := p.Float32()
		return f
	}
	w0, g0 := make([]float32, n), make([]float32, n)
	for i := range w0 {
		w0[i] = float32(rng.NormFloat64())
		g0[i] = float32(rng.NormFloat64() * 1e-2)
	}
	// Ties: a few elements whose float64 sum lies halfway between floats.
	w0[7], g0[7] = float32(1<<30+1<<7), float32(64*(1+1.0/(1<<23)))*float32(1-1.0/(1<<23))
	for _, momentum := range []float64{0, 0.9} {
		run := func(procs int) []float32 {
			defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
			o, err := NewSGD(SGDConfig{LR: 0.1, Momentum: momentum, WeightDecay: momentum / 9})
			require.NoError(t, err)
			w := &Param{Name: "w", Value: graph.FromFloat32(append([]float32{}, w0...), n), Grad: graph.FromFloat32(g0, n)}
			small := &Param{Name: "s", Value: graph.FromFloat32([]float32{1, 2}, 2), Grad: graph.FromFloat32([]float32{0.5, 0.25}, 2), Group: NoDecayGroup}
			for step := 0; step < 2; step++ {
				require.NoError(t, o.Step([]*Param{w, small}))
			}
			if momentum == 0 {
				assert.Equal(t, []float32{exact(-0.1, 0.5, exact(-0.1, 0.5, 1)), exact(-0.1, 0.25, exact(-0.1, 0.25, 2))}, small.Value.Float32s())
			}
			return w.Value.Float32s()
		}
		one, four := run(1), run(4)
		require.Equal(t, one, four, "momentum %v: the update depends on GOMAXPROCS", momentum)
		lr, wd, m := float32(-0.1), float32(momentum/9), float32(momentum)
		for i := 0; i < n; i++ {
			if i != 7 && i%97 != 0 {
				continue
			}
			w, buf := w0[i], float32(0)
			for step := 0; step < 2; step++ {
				d := g0[i]
				if momentum != 0 {
					d = exact(wd, w, d)
					if step == 0 {
						buf = d
					} else {
						buf = exact(1, d, buf*m)
					}
					d = buf
				}
				w = exact(lr, d, w)
			}
			require.Equal(t, w, one[i], "momentum %v: element %d", momentum, i)
		}
	}
}

// TestAdamLargeStepSplitFree: an AdamW step large enough to be split over
// goroutines gives the same parameters and state whatever GOMAXPROCS, and
// the same as updating the parameter alone in small pieces (each element
// is independent).
func TestAdamLargeStepSplitFree(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	const n = 2<<16 + 77
	w0, g0 := make([]float32, n), make([]float32, n)
	for i := range w0 {
		w0[i] = float32(rng.NormFloat64())
		g0[i] = float32(rng.NormFloat64() * 1e-2)
	}
	run := func(procs int, pieces int) []float32 {
		defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(procs))
		cfg := DefaultAdamWConfig(1e-2)
		cfg.AMSGrad = true
		o, err := NewAdamW(cfg)
		require.NoError(t, err)
		var params []*Param
		for p := 0; p < pieces; p++ {
			lo, hi := p*n/pieces, (p+1)*n/pieces
			params = append(params, &Param{Name: fmt.Sprint(p), Value: graph.FromFloat32(append([]float32{}, w0[lo:hi]...), hi-lo), Grad: graph.FromFloat32(g0[lo:hi], hi-lo)})
		}
		for step := 0; step < 3; step++ {
			require.NoError(t, o.Step(params))
		}
		var out []float32
		for _, p := range params {
			out = append(out, p.Value.Float32s()...)
		}
		return out
	}
	one := run(1, 1)
	assert.Equal(t, one, run(4, 1), "GOMAXPROCS 4")
	assert.Equal(t, one, run(1, 100), "100 small parameters, serial")
	assert.NotEqual(t, w0, one)
}
