package cpu_test

import (
	"context"
	"path/filepath"
	"slices"
	"strings"
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

// residualFusedOps are the fused ops of a residual block's end and its
// gradient.
var residualFusedOps = []string{graph.BatchNormAddRelu, graph.AddReluGrad, graph.BatchNormAddReluGrad}

func init() {
	// The CPU backend with every fused op but those.
	backend.Register("cpu-no-residual-fusions", func() (backend.Backend, error) {
		var ops []string
		for _, op := range (&cpu.Backend{}).FusedOps() {
			if !slices.Contains(residualFusedOps, op) {
				ops = append(ops, op)
			}
		}
		return &cpu.Backend{FusedOnly: ops}, nil
	})
}

// TestResidualFusionsTrainAlike runs the training step (forward, loss,
// backward) of the ResNet fixtures on three batches on the CPU with and
// without BatchNormAddRelu and AddReluGrad: the fused steps run them in
// place of every block end's BatchNormalization, Add and Relu and of the
// masked gradient sums, and the losses, every gradient and the BatchNorm
// running statistics are the same bits. (The kit's Training part checks
// the fused steps, updates included, against PyTorch's goldens.)
func TestResidualFusionsTrainAlike(t *testing.T) {
	for _, fixture := range []string{"resnet18_small", "cifar_resnet"} {
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
			run := func(be string) ([]step, map[string]*graph.Tensor, map[string]int) {
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
				sf := p.Executable().(backend.Stateful)
				stats := map[string]*graph.Tensor{}
				for _, name := range sf.StateNames() {
					if strings.HasSuffix(name, "running_mean") || strings.HasSuffix(name, "running_var") {
						v := sf.HostState(name)
						require.NotNil(t, v, name)
						stats[name] = v.Clone()
					}
				}
				return steps, stats, ops
			}
			fused, fusedStats, fusedOps := run("cpu")
			plain, plainStats, plainOps := run("cpu-no-residual-fusions")
			for _, op := range residualFusedOps {
				assert.Zero(t, plainOps[op], op)
			}
			assert.Positive(t, fusedOps[graph.BatchNormAddRelu], "%v", fusedOps)
			assert.Positive(t, fusedOps[graph.BatchNormAddReluGrad], "%v", fusedOps)
			assert.Less(t, fusedOps["Add"], plainOps["Add"], "fused %v, plain %v", fusedOps, plainOps)
			for s := range fused {
				assert.Equal(t, plain[s].loss, fused[s].loss, "step %d loss", s)
				require.Len(t, fused[s].grads, len(plain[s].grads))
				for i := range fused[s].grads {
					assert.Equal(t, plain[s].grads[i].Float32s(), fused[s].grads[i].Float32s(), "step %d gradient %d", s, i)
				}
			}
			require.NotEmpty(t, fusedStats)
			for name, v := range plainStats {
				require.Contains(t, fusedStats, name)
				assert.Equal(t, v.Float32s(), fusedStats[name].Float32s(), name)
			}
			t.Logf("%s: fused ops %v", fixture, fusedOps)
		})
	}
}
