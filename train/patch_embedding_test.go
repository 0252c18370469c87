package train_test

import (
	"context"
	"math"
	"path/filepath"
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// noPatchifyBackend is the CPU backend without the Patchify kernel, so
// that fuse-patch-embedding does not run.
const noPatchifyBackend = "cpu-no-patchify"

func init() {
	backend.Register(noPatchifyBackend, func() (backend.Backend, error) {
		ops := slices.DeleteFunc((&cpu.Backend{}).FusedOps(), func(op string) bool { return op == graph.Patchify })
		return &cpu.Backend{FusedOnly: ops}, nil
	})
}

// TestPatchEmbeddingGradients: the patch embeddings of vit_tiny (timm's
// flatten(2).transpose(1, 2)) and vit_tv (torchvision's reshape and
// permute) run as Patchify and one GEMM (fuse-patch-embedding): the step
// has a Patchify and no Conv forward, and gives the loss and gradients of
// the step without the pass to rounding (within 1e-5 of each gradient's
// RMS), both matching PyTorch's (models/vit_tiny_grad_golden.py).
func TestPatchEmbeddingGradients(t *testing.T) {
	for _, name := range []string{"vit_tiny", "vit_tv"} {
		t.Run(name, func(t *testing.T) { patchEmbeddingGradients(t, name) })
	}
}

func patchEmbeddingGradients(t *testing.T, name string) {
	dir := filepath.Join("..", "models", name)
	m, err := importer.Load(filepath.Join(dir, name+"_train.onnx"))
	require.NoError(t, err)
	batch, err := tensorio.ReadNPZ(filepath.Join(dir, "train_case.npz"))
	require.NoError(t, err)
	golden, err := tensorio.ReadNPZ(filepath.Join(dir, "grad_golden.npz"))
	require.NoError(t, err)

	type outcome struct {
		loss  float64
		grads map[string][]float32
		ops   map[string]int
	}
	step := func(be string) outcome {
		p, err := train.Build(m, train.ProgramConfig{Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, Backend: be})
		require.NoError(t, err)
		res, err := p.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": batch["input"]}, batch["labels"], 1)
		require.NoError(t, err)
		o := outcome{loss: res.Loss, grads: map[string][]float32{}, ops: map[string]int{}}
		for i, prm := range p.Params {
			o.grads[prm.Name] = append([]float32(nil), res.Grads[i].Float32s()...)
		}
		pi, ok := p.Executable().(backend.PlanInspector)
		require.True(t, ok)
		for _, n := range pi.LastRunNodes() {
			o.ops[n.OpType]++
		}
		return o
	}
	on, off := step("cpu"), step(noPatchifyBackend)
	assert.Equal(t, 1, on.ops[graph.Patchify], "the pass ran")
	assert.Zero(t, on.ops["Conv"], "no Conv forward left")
	assert.Zero(t, off.ops[graph.Patchify])
	assert.Equal(t, 1, off.ops["Conv"])

	torchLoss := float64(golden["loss"].Float32s()[0])
	assert.InEpsilon(t, torchLoss, on.loss, 1e-6, "loss with the pass against PyTorch")
	assert.InEpsilon(t, off.loss, on.loss, 1e-7, "loss with and without the pass")
	require.Len(t, on.grads, len(golden)-1)
	for gname, want := range golden {
		if gname == "loss" {
			continue
		}
		pname := gname[len("grad__"):]
		got, ok := on.grads[pname]
		require.True(t, ok, "no gradient for %s", pname)
		ref := off.grads[pname]
		w := want.Float32s()
		require.Len(t, got, len(w), pname)
		var norm, dTorch, dOff float64
		for i := range w {
			norm += float64(w[i]) * float64(w[i])
			dTorch = max(dTorch, math.Abs(float64(got[i])-float64(w[i])))
			dOff = max(dOff, math.Abs(float64(got[i])-float64(ref[i])))
		}
		scale := math.Sqrt(norm/float64(len(w))) + 1e-12
		assert.Less(t, dTorch/scale, 1e-4, "%s: max |ours-PyTorch| %.3g, RMS %.3g", pname, dTorch, scale)
		assert.Less(t, dOff/scale, 1e-5, "%s: max |with-without| %.3g, RMS %.3g", pname, dOff, scale)
	}
}
