package cpu_test

import (
	"context"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/backendtest"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// epilogueFusedOps are the fused ops that fold a memory pass into the
// GEMM epilogue or a normalisation's row loop.
var epilogueFusedOps = []string{graph.MatMulAddGeluErf, graph.MatMulGeluErfGrad, graph.LayerNormGradAdd,
	graph.PermutedMatMulAdd, graph.MatMulAddAdd}

func init() {
	// The CPU backend with every fused op but those.
	backend.Register("cpu-no-epilogue-fusions", func() (backend.Backend, error) {
		var ops []string
		for _, op := range (&cpu.Backend{}).FusedOps() {
			if !slices.Contains(epilogueFusedOps, op) {
				ops = append(ops, op)
			}
		}
		return &cpu.Backend{FusedOnly: ops}, nil
	})
}

// TestEpilogueFusionsTrainAlike runs the training step (forward, loss,
// backward) of the transformer fixtures (the ViT, and the pre-norm
// transformer with its loss in the graph) on three batches on the CPU
// with and without the epilogue fusions: the fused steps run the fused ops
// in place of their chains (the MLP's GELU in both products' epilogues,
// the residual gradients added in LayerNorm's gradient), and the losses
// and every gradient are the same bits. (The kit's Training part checks
// the fused steps, updates included, against PyTorch's goldens.)
func TestEpilogueFusionsTrainAlike(t *testing.T) {
	for _, fixture := range []string{"vit_tiny", "transformer_loss"} {
		t.Run(fixture, func(t *testing.T) {
			dir := filepath.Join("..", "..", "models", fixture)
			gf, names := backendtest.ReadGolden(t, filepath.Join(dir, "train_golden.json"))
			gc := gf.Configs[names[0]]
			arrays, err := tensorio.ReadNPZ(filepath.Join(dir, gf.Data))
			require.NoError(t, err)
			type step struct {
				loss  float64
				grads []*graph.Tensor
			}
			run := func(be string) ([]step, map[string]int) {
				m, err := importer.Load(filepath.Join(dir, gf.Model))
				require.NoError(t, err)
				loss, err := train.ParseLoss(gc.Loss)
				require.NoError(t, err)
				p, err := train.Build(m, train.ProgramConfig{Loss: loss, Seed: 1, Backend: be})
				require.NoError(t, err)
				var steps []step
				for s := 0; s < 3; s++ {
					inputs := map[string]*graph.Tensor{}
					for _, name := range gf.Inputs {
						inputs[name] = rowsAt(t, arrays[name], s, gc.MicroBatchSize)
					}
					var labels *graph.Tensor
					if gf.Labels != "" && p.NeedsLabels {
						labels = rowsAt(t, arrays[gf.Labels], s, gc.MicroBatchSize)
					}
					res, err := p.ForwardBackward(context.Background(), inputs, labels, 1)
					require.NoError(t, err)
					st := step{loss: res.Loss}
					for _, g := range res.Grads {
						st.grads = append(st.grads, g.Clone())
					}
					steps = append(steps, st)
				}
				ops := map[string]int{}
				pi := p.Executable().(backend.PlanInspector)
				for _, n := range pi.LastRunNodes() {
					ops[n.OpType]++
				}
				return steps, ops
			}
			fused, fusedOps := run("cpu")
			plain, plainOps := run("cpu-no-epilogue-fusions")
			for _, op := range epilogueFusedOps {
				assert.Zero(t, plainOps[op], op)
			}
			assert.Positive(t, fusedOps[graph.MatMulAddGeluErf], "%v", fusedOps)
			assert.Positive(t, fusedOps[graph.MatMulGeluErfGrad], "%v", fusedOps)
			assert.Positive(t, fusedOps[graph.LayerNormGradAdd], "%v", fusedOps)
			assert.Zero(t, fusedOps[graph.GeluErfGradX], "%v", fusedOps)
			for s := range fused {
				assert.Equal(t, plain[s].loss, fused[s].loss, "step %d loss", s)
				require.Len(t, fused[s].grads, len(plain[s].grads))
				for i := range fused[s].grads {
					assert.Equal(t, plain[s].grads[i].Float32s(), fused[s].grads[i].Float32s(), "step %d gradient %d", s, i)
				}
			}
			t.Logf("%s: fused ops %v", fixture, fusedOps)
		})
	}
}

// rowsAt is rows [s·n, (s+1)·n) of x, wrapping around its first dimension.
func rowsAt(t *testing.T, x *graph.Tensor, s, n int) *graph.Tensor {
	t.Helper()
	require.NotNil(t, x)
	rows := x.Shape[0]
	if n <= 0 || n > rows {
		n = rows
	}
	per := x.Size() / rows
	out := graph.Zeros(x.DType, append([]int{n}, x.Shape[1:]...)...)
	for r := 0; r < n; r++ {
		src := ((s*n + r) % rows) * per
		for i := 0; i < per; i++ {
			out.SetFloat(r*per+i, x.Float(src+i))
		}
	}
	return out
}
