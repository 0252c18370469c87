package train

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// fusedCases are committed models with a training case (train_golden.json
// names its inputs and labels in train_case.npz).
var fusedCases = []string{"mlp", "cifar_resnet", "vit_tiny", "transformer_loss", "gpt", "rnn_seq"}

// fusedBatch reads the first rows of a model's training case: the model
// file, its loss, inputs and labels.
func fusedBatch(t *testing.T, name string) (string, LossConfig, map[string]*graph.Tensor, *graph.Tensor) {
	t.Helper()
	raw, err := os.ReadFile("../models/" + name + "/train_golden.json")
	require.NoError(t, err)
	var gf struct {
		Model   string
		Data    string
		Inputs  []string
		Labels  string
		Configs map[string]struct{ Loss string }
	}
	require.NoError(t, json.Unmarshal(raw, &gf))
	arrays, err := tensorio.ReadNPZ("../models/" + name + "/" + gf.Data)
	require.NoError(t, err)
	rows := func(a *graph.Tensor) *graph.Tensor {
		n := min(4, a.Shape[0])
		per := a.Size() / a.Shape[0]
		c := a.Clone()
		c.Shape[0] = n
		switch d := c.Data.(type) {
		case []float32:
			c.Data = d[:n*per]
		case []int64:
			c.Data = d[:n*per]
		default:
			t.Fatalf("%s: dtype %v", name, a.DType)
		}
		return c
	}
	inputs := map[string]*graph.Tensor{}
	for _, in := range gf.Inputs {
		require.Contains(t, arrays, in)
		inputs[in] = rows(arrays[in])
	}
	var loss string
	for _, c := range gf.Configs {
		loss = c.Loss
	}
	lc, err := ParseLoss(loss)
	require.NoError(t, err)
	var labels *graph.Tensor
	if lc.Kind != "output" && gf.Labels != "" {
		labels = rows(arrays[gf.Labels])
	}
	return "../models/" + name + "/" + gf.Model, lc, inputs, labels
}

func optParams(p *Program) []*optim.Param {
	out := make([]*optim.Param, len(p.Params))
	for i, prm := range p.Params {
		out[i] = &optim.Param{Name: prm.Name, Value: prm.Value}
	}
	optim.GroupByDecay(out, nil)
	return out
}

type fusedOpt struct {
	name string
	make func() (optim.Optimizer, error)
}

var fusedOpts = []fusedOpt{
	{"sgd", func() (optim.Optimizer, error) { return optim.NewSGD(optim.SGDConfig{LR: 0.05}) }},
	{"sgd-momentum-wd", func() (optim.Optimizer, error) {
		return optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9, Dampening: 0.1, WeightDecay: 1e-3})
	}},
	{"sgd-nesterov", func() (optim.Optimizer, error) {
		return optim.NewSGD(optim.SGDConfig{LR: 0.05, Momentum: 0.9, Nesterov: true, WeightDecay: 1e-3})
	}},
	{"adam", func() (optim.Optimizer, error) {
		c := optim.DefaultAdamConfig(1e-3)
		c.WeightDecay = 1e-2
		return optim.NewAdam(c)
	}},
	{"adamw-amsgrad", func() (optim.Optimizer, error) {
		c := optim.DefaultAdamWConfig(1e-3)
		c.AMSGrad = true
		return optim.NewAdamW(c)
	}},
	{"adamw-maximize", func() (optim.Optimizer, error) {
		c := optim.DefaultAdamWConfig(1e-3)
		c.Maximize = true
		return optim.NewAdamW(c)
	}},
}

// TestFusedStepMatchesSeparateRuns: a step whose update runs inside the
// training program (FusedUpdate, BindUpdate, Step) computes the same bits
// as the micro-batch Run followed by the clip and optimizer Runs over the
// gradient sums, over several steps with a learning rate that changes
// each step: losses, gradient norms, parameters and optimizer slots.
func TestFusedStepMatchesSeparateRuns(t *testing.T) {
	ctx := context.Background()
	for _, c := range fusedCases {
		model, loss, inputs, labels := fusedBatch(t, c)
		for _, o := range fusedOpts {
			if testing.Short() && c != "mlp" && o.name != "adamw-amsgrad" {
				continue
			}
			for _, clip := range []struct {
				name        string
				value, norm float64
			}{{"none", 0, 0}, {"value", 0.01, 0}, {"norm", 0, 0.5}, {"norm+value", 0.01, 0.5}} {
				t.Run(c+"/"+o.name+"/clip="+clip.name, func(t *testing.T) {
					sep, fused, optA, optB := separateAndFused(t, model, loss, o)
					optA.(optim.Binder).Bind(sep.Backend(), sep.Executable())
					pa, pb := optParams(sep), optParams(fused)
					require.NoError(t, fused.BindUpdate(optB, pb, UpdateRecipe{ClipGradValue: clip.value, ClipGradNorm: clip.norm, ReportNorm: true}))
					for step := range 3 {
						lr := 0.05 / float64(step+1)
						if strings.HasPrefix(o.name, "adam") {
							lr = 1e-3 / float64(step+1)
						}
						optA.SetLR(lr)
						optB.SetLR(lr)
						sep.StartWindow()
						r, err := sep.ForwardBackward(ctx, inputs, labels, 1)
						require.NoError(t, err)
						lossA := r.Loss
						maxNorm := math.Inf(1)
						if clip.norm > 0 {
							maxNorm = clip.norm
						}
						norm, err := sep.ClipGradNorm(ctx, maxNorm)
						require.NoError(t, err)
						if clip.value > 0 {
							require.NoError(t, sep.ClipGradValue(ctx, clip.value))
						}
						for i := range pa {
							pa[i].Grad = r.Grads[i]
						}
						require.NoError(t, optA.Step(pa))

						out, err := fused.Step(ctx, inputs, labels, 1)
						require.NoError(t, err)
						assert.Equal(t, math.Float64bits(lossA), math.Float64bits(out.Loss), "step %d: loss", step)
						assert.Equal(t, math.Float32bits(float32(norm)), math.Float32bits(float32(out.GradNorm)), "step %d: gradient norm", step)
						for i := range sep.Params {
							require.Equal(t, bitsOf(sep.Params[i].Value), bitsOf(fused.Params[i].Value), "step %d: parameter %s", step, sep.Params[i].Name)
						}
						for name, buf := range sep.Buffers {
							require.Equal(t, bitsOf(buf), bitsOf(fused.Buffers[name]), "step %d: buffer %s", step, name)
						}
					}
					stA, stB := optA.State(), optB.State()
					require.Equal(t, len(stA), len(stB))
					for k, v := range stA {
						require.Contains(t, stB, k)
						if v.DType == graph.Float32 {
							assert.Equal(t, bitsOf(v), bitsOf(stB[k]), "optimizer state %s", k)
						} else {
							assert.Equal(t, v.Float(0), stB[k].Float(0), "optimizer state %s", k)
						}
					}
					// Only BatchNorm's running statistics are copied into
					// their buffers (a few KB), by both programs alike.
					assert.Equal(t, sep.StateTraffic(), fused.StateTraffic(), "the fused step moved state bytes or copied an update")
					if len(sep.Buffers) == 0 {
						assert.Equal(t, backend.StateTraffic{}, fused.StateTraffic())
					}
				})
			}
		}
	}
}

// separateAndFused builds model twice, with gradient sums (the separate
// path) and with the update inside the step, and makes an optimizer for
// each.
func separateAndFused(t *testing.T, model string, loss LossConfig, o fusedOpt) (sep, fused *Program, optA, optB optim.Optimizer) {
	t.Helper()
	ma, err := importer.Load(model)
	require.NoError(t, err)
	mb, err := importer.Load(model)
	require.NoError(t, err)
	sep, err = Build(ma, ProgramConfig{Loss: loss, GradSums: true, Seed: 3})
	require.NoError(t, err)
	fused, err = Build(mb, ProgramConfig{Loss: loss, FusedUpdate: true, Seed: 3})
	require.NoError(t, err)
	optA, err = o.make()
	require.NoError(t, err)
	optB, err = o.make()
	require.NoError(t, err)
	return sep, fused, optA, optB
}

func bitsOf(t *graph.Tensor) []uint32 {
	d := t.Float32s()
	out := make([]uint32, len(d))
	for i, v := range d {
		out[i] = math.Float32bits(v)
	}
	return out
}

// TestFusedFP16StepMatchesSeparateRuns: under fp16 autocast with loss
// scaling, the fused step unscales the gradients, checks them for inf/NaN
// and gates its updates on that flag inside the program: a step forced to
// overflow (a huge loss scale) is skipped, reports the flag, and leaves
// parameters and optimizer state (step counts included) as the separate
// path does when it does not call the optimizer; the other steps compute
// the separate path's bits.
func TestFusedFP16StepMatchesSeparateRuns(t *testing.T) {
	ctx := context.Background()
	scales := []float32{256, 1e30, 128, 128}
	for _, c := range []string{"mlp", "vit_tiny"} {
		model, loss, inputs, labels := fusedBatch(t, c)
		for _, o := range []fusedOpt{fusedOpts[1], fusedOpts[4]} {
			for _, maxNorm := range []float64{0, 0.5} {
				t.Run(c+"/"+o.name+"/clip="+strconv.FormatFloat(maxNorm, 'g', -1, 64), func(t *testing.T) {
					ma, err := importer.Load(model)
					require.NoError(t, err)
					mb, err := importer.Load(model)
					require.NoError(t, err)
					sep, err := Build(ma, ProgramConfig{Loss: loss, GradSums: true, MixedPrecision: "fp16", Seed: 3})
					require.NoError(t, err)
					fused, err := Build(mb, ProgramConfig{Loss: loss, FusedUpdate: true, MixedPrecision: "fp16", Seed: 3})
					require.NoError(t, err)
					optA, err := o.make()
					require.NoError(t, err)
					optB, err := o.make()
					require.NoError(t, err)
					optA.(optim.Binder).Bind(sep.Backend(), sep.Executable())
					pa, pb := optParams(sep), optParams(fused)
					assert.ErrorContains(t, fused.BindUpdate(optB, pb, UpdateRecipe{}), "LossScaled")
					require.NoError(t, fused.BindUpdate(optB, pb, UpdateRecipe{ClipGradNorm: maxNorm, LossScaled: true, ReportNorm: true}))
					skipped := 0
					for step, scale := range scales {
						sep.StartWindow()
						r, err := sep.ForwardBackward(ctx, inputs, labels, scale)
						require.NoError(t, err)
						found, err := sep.UnscaleGrads(ctx, float32(1/float64(scale)))
						require.NoError(t, err)
						clip := math.Inf(1)
						if maxNorm > 0 {
							clip = maxNorm
						}
						norm, err := sep.ClipGradNorm(ctx, clip)
						require.NoError(t, err)
						if !found {
							for i := range pa {
								pa[i].Grad = r.Grads[i]
							}
							require.NoError(t, optA.Step(pa))
						}
						out, err := fused.Step(ctx, inputs, labels, scale)
						require.NoError(t, err)
						assert.Equal(t, found, out.FoundInf, "step %d: found inf", step)
						assert.Equal(t, step == 1, out.FoundInf, "step %d: only the huge scale overflows", step)
						if out.FoundInf {
							skipped++
						} else {
							assert.Equal(t, math.Float32bits(float32(norm)), math.Float32bits(float32(out.GradNorm)), "step %d: norm", step)
						}
						assert.Equal(t, math.Float64bits(r.Loss), math.Float64bits(out.Loss), "step %d: loss", step)
						for i := range sep.Params {
							require.Equal(t, bitsOf(sep.Params[i].Value), bitsOf(fused.Params[i].Value), "step %d: parameter %s", step, sep.Params[i].Name)
						}
					}
					assert.Equal(t, 1, skipped)
					stA, stB := optA.State(), optB.State()
					require.Equal(t, len(stA), len(stB))
					for k, v := range stA {
						require.Contains(t, stB, k)
						if v.DType == graph.Float32 {
							assert.Equal(t, bitsOf(v), bitsOf(stB[k]), "optimizer state %s", k)
						} else {
							assert.Equal(t, v.Float(0), stB[k].Float(0), "optimizer state %s (step counts)", k)
						}
					}
				})
			}
		}
	}
}
