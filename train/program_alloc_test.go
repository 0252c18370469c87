package train

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// replayExe answers every Run with the outputs of one real run, and
// records the loss scale it was fed.
type replayExe struct {
	out   map[string]*graph.Tensor
	scale float32
	fed   int
}

func (r *replayExe) Run(_ context.Context, in map[string]*graph.Tensor) (map[string]*graph.Tensor, error) {
	r.scale = in[lossScaleInput].Float32s()[0]
	r.fed = len(in)
	return r.out, nil
}

var _ backend.Executable = (*replayExe)(nil)

// TestStepPathAllocatesNothing: around the backend's Run, a steady-state
// ForwardBackward and an SGD (momentum) step allocate nothing: the feed
// map, the loss scale's tensor, the result and the optimizer's task list
// are reused. Each call still feeds its own loss scale and returns the
// run's loss and gradients.
func TestStepPathAllocatesNothing(t *testing.T) {
	m, err := importer.Load("../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	p, err := Build(m, ProgramConfig{Loss: LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}})
	require.NoError(t, err)
	x := graph.Zeros(graph.Float32, 4, 784)
	labels := graph.FromInt64([]int64{1, 2, 3, 4}, 4)
	inputs := map[string]*graph.Tensor{p.DataInputs[0]: x}
	ctx := context.Background()
	real, err := p.ForwardBackward(ctx, inputs, labels, 1)
	require.NoError(t, err)
	loss := real.Loss
	out, err := p.trainExe.Run(ctx, func() map[string]*graph.Tensor {
		f := map[string]*graph.Tensor{lossScaleInput: graph.FromFloat32([]float32{1})}
		require.NoError(t, p.feeds(f, inputs, labels))
		return f // parameters and buffers are the program's state: not fed
	}())
	require.NoError(t, err)
	cached := map[string]*graph.Tensor{}
	for k, v := range out {
		cached[k] = v.Clone()
	}
	rx := &replayExe{out: cached}
	p.trainExe = rx

	opt, err := optim.NewSGD(optim.SGDConfig{LR: 0.01, Momentum: 0.9})
	require.NoError(t, err)
	params := make([]*optim.Param, len(p.Params))
	for i, prm := range p.Params {
		params[i] = &optim.Param{Name: prm.Name, Value: prm.Value}
	}
	scale := float32(1)
	step := func() {
		scale++
		r, err := p.ForwardBackward(ctx, inputs, labels, scale)
		if err != nil {
			panic(err)
		}
		for i, g := range r.Grads {
			params[i].Grad = g
		}
		if err := opt.Step(params); err != nil {
			panic(err)
		}
	}
	step()
	allocs := testing.AllocsPerRun(20, step)
	assert.Zero(t, allocs, "allocations per step around Run")
	assert.Equal(t, scale, rx.scale, "the latest loss scale was fed")
	assert.Equal(t, len(p.DataInputs)+1+1, rx.fed, "data, labels and the loss scale (parameters and buffers are state); nothing left from earlier calls")
	r, err := p.ForwardBackward(ctx, inputs, labels, 3)
	require.NoError(t, err)
	assert.Equal(t, loss, r.Loss)
	require.Len(t, r.Grads, len(p.Params))
	for i, prm := range p.Params {
		assert.Same(t, cached[gradPrefix+prm.Name], r.Grads[i])
	}
}
