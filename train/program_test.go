package train

import (
	"context"
	"math"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/models"
)

// TestBuildSmoke builds the training program of every committed model and
// checks what Build returns against PyTorch: the parameters are the
// model's initializers minus its BatchNorm buffers, the eval program's
// output equals PyTorch's eval-mode output (golden.npz), and the training
// step's loss equals the loss computed from PyTorch's training-mode output
// (golden "<output>__train"), with one finite gradient per parameter.
func TestBuildSmoke(t *testing.T) {
	ctx := context.Background()
	for _, name := range []string{"mlp", "fmnist_cnn", "cifar_resnet", "vit_tiny", "transformer_loss", "convtranspose_resize", "resnet18_small"} {
		t.Run(name, func(t *testing.T) {
			m, err := importer.Load("../models/" + name + "/" + name + "_train.onnx")
			require.NoError(t, err)
			loss := LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}
			switch name {
			case "transformer_loss":
				loss = LossConfig{Kind: "output", Output: "loss"}
			case "convtranspose_resize":
				loss = LossConfig{Kind: "mse"}
			}
			nInit := len(m.Graph.Initializers)
			p, err := Build(m, ProgramConfig{Loss: loss})
			require.NoError(t, err)
			g, err := models.LoadGolden("../models/" + name + "/golden.npz")
			require.NoError(t, err)

			require.NotEmpty(t, p.Params)
			assert.Equal(t, nInit, len(p.Params)+len(p.Buffers), "parameters and buffers together are the initializers")
			for _, prm := range p.Params {
				assert.True(t, prm.Value.DType.IsFloat(), "parameter %q is %s", prm.Name, prm.Value.DType)
			}
			inputs := map[string]*graph.Tensor{}
			for _, in := range p.DataInputs {
				require.Contains(t, g, in)
				inputs[in] = g[in]
			}

			var labels *graph.Tensor
			batch := inputs[p.DataInputs[0]].Shape[0]
			switch loss.Kind {
			case "cross_entropy":
				l := make([]int64, batch)
				for i := range l {
					l[i] = int64(i % 10)
				}
				labels = graph.FromInt64(l, batch)
			case "mse":
				labels = graph.Zeros(graph.Float32, g["output"].Shape...)
			}

			// Eval mode first (it leaves the BatchNorm statistics alone).
			evalLoss, logits, err := p.Evaluate(ctx, inputs, labels)
			require.NoError(t, err)
			if loss.Kind == "output" {
				assert.InDelta(t, g["loss"].Float(0), evalLoss, 1e-4, "eval loss against PyTorch")
			} else {
				require.NotNil(t, logits)
				assertClose(t, g["output"], logits, 2e-5, "eval output against PyTorch")
				assert.InDelta(t, referenceLoss(loss.Kind, g["output"], labels), evalLoss, 1e-4, "eval loss")
			}

			res, err := p.ForwardBackward(ctx, inputs, labels, 1)
			require.NoError(t, err)
			want := 0.0
			if loss.Kind == "output" {
				want = g["loss"+models.TrainSuffix].Float(0)
			} else {
				want = referenceLoss(loss.Kind, g["output"+models.TrainSuffix], labels)
			}
			assert.InDelta(t, want, res.Loss, 2e-5*math.Max(1, math.Abs(want)), "training loss against PyTorch's training-mode output")
			require.Len(t, res.Grads, len(p.Params))
			nonzero := 0
			for i, gr := range res.Grads {
				for j := 0; j < gr.Size(); j++ {
					v := gr.Float(j)
					require.False(t, math.IsNaN(v) || math.IsInf(v, 0), "gradient of %q", p.Params[i].Name)
					if v != 0 {
						nonzero++
						break
					}
				}
			}
			assert.Greater(t, nonzero, len(p.Params)/2, "most parameters get a nonzero gradient")
		})
	}
}

// assertClose checks got against want elementwise within tol scaled by the
// largest magnitude in want.
func assertClose(t *testing.T, want, got *graph.Tensor, tol float64, msg string) {
	t.Helper()
	require.Equal(t, want.Shape, got.Shape, msg)
	scale := 1.0
	for i := 0; i < want.Size(); i++ {
		scale = math.Max(scale, math.Abs(want.Float(i)))
	}
	worst, at := 0.0, 0
	for i := 0; i < want.Size(); i++ {
		if d := math.Abs(want.Float(i) - got.Float(i)); d > worst {
			worst, at = d, i
		}
	}
	assert.LessOrEqual(t, worst, tol*scale, "%s: element %d is %v, want %v", msg, at, got.Float(at), want.Float(at))
}

// referenceLoss is the mean cross-entropy (class labels) or mean squared
// error of logits, in float64, written from the definitions.
func referenceLoss(kind string, logits, labels *graph.Tensor) float64 {
	if kind == "mse" {
		s := 0.0
		for i := 0; i < logits.Size(); i++ {
			d := logits.Float(i) - labels.Float(i)
			s += d * d
		}
		return s / float64(logits.Size())
	}
	n, c := logits.Shape[0], logits.Shape[1]
	s := 0.0
	for i := 0; i < n; i++ {
		mx := math.Inf(-1)
		for j := 0; j < c; j++ {
			mx = math.Max(mx, logits.Float(i*c+j))
		}
		sum := 0.0
		for j := 0; j < c; j++ {
			sum += math.Exp(logits.Float(i*c+j) - mx)
		}
		s += mx + math.Log(sum) - logits.Float(i*c+int(labels.Float(i)))
	}
	return s / float64(n)
}
