package cuda_test

// Tests that need an NVIDIA GPU. Without one each skips with "no GPU:
// <the reason Open gives>" (testutil.SkipHardware, allowed under CI=true);
// bench/cuda_check.sh runs them on a GPU machine.

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/backend/cuda"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/models"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

func needGPU(t *testing.T) *cuda.Backend {
	t.Helper()
	b, err := cuda.Open()
	if err != nil {
		testutil.SkipHardware(t, "no GPU: %v", err)
	}
	return b
}

// TestOpenSaysWhatIsMissing: on a machine without a GPU, Open fails at
// once with one line that wraps ErrUnavailable and names the driver, the
// library or the device; with one, it names the GPU.
func TestOpenSaysWhatIsMissing(t *testing.T) {
	b, err := cuda.Open()
	if err == nil {
		assert.NotEmpty(t, b.GPU().Name)
		assert.Equal(t, "cuda", b.Name())
		return
	}
	assert.ErrorIs(t, err, cuda.ErrUnavailable)
	msg := err.Error()
	assert.NotContains(t, msg, "\n")
	assert.True(t, strings.Contains(msg, "no NVIDIA driver") || strings.Contains(msg, "not found") || strings.Contains(msg, "no GPU"), msg)
	_, err2 := backend.Open("cuda")
	require.Error(t, err2)
	assert.Equal(t, msg, err2.Error(), "the registry returns the same one line")
}

// TestGPUForwardMatchesCPU runs every fixture's inference export on both
// backends on the fixture's golden inputs.
func TestGPUForwardMatchesCPU(t *testing.T) {
	gpu := needGPU(t)
	cpu, err := backend.Open("cpu")
	require.NoError(t, err)
	files, err := filepath.Glob("../../models/*/*_eval.onnx")
	require.NoError(t, err)
	for _, f := range files {
		goldenPath := filepath.Join(filepath.Dir(f), "golden.npz")
		if _, err := os.Stat(goldenPath); err != nil {
			continue // a fixture without recorded inputs (bn_dropout): not a case
		}
		t.Run(filepath.Base(f), func(t *testing.T) {
			m, err := importer.Load(f)
			require.NoError(t, err)
			golden, err := models.LoadGolden(goldenPath)
			require.NoError(t, err)
			in := map[string]*graph.Tensor{}
			for _, vi := range m.Graph.Inputs {
				if _, init := m.Graph.Initializers[vi.Name]; init {
					continue
				}
				require.Contains(t, golden, vi.Name)
				in[vi.Name] = golden[vi.Name]
			}
			ce, err := cpu.Compile(m, backend.CompileOptions{})
			require.NoError(t, err)
			ge, err := gpu.Compile(m, backend.CompileOptions{})
			require.NoError(t, err)
			want, err := ce.Run(context.Background(), in)
			require.NoError(t, err)
			for range 3 { // eager, captured, replayed
				got, err := ge.Run(context.Background(), in)
				require.NoError(t, err)
				for name, w := range want {
					assertClose(t, w, got[name], 1e-4, name)
				}
			}
		})
	}
}

func assertClose(t *testing.T, want, got *graph.Tensor, rel float64, name string) {
	t.Helper()
	require.NotNil(t, got, name)
	require.Equal(t, want.Shape, got.Shape, name)
	if want.DType != graph.Float32 {
		assert.Equal(t, want.Data, got.Data, name)
		return
	}
	w, g := want.Float32s(), got.Float32s()
	var scale float64
	for _, v := range w {
		scale = math.Max(scale, math.Abs(float64(v)))
	}
	for i := range w {
		if !assert.InDelta(t, w[i], g[i], rel*math.Max(scale, 1), "%s[%d]", name, i) {
			return
		}
	}
}

// TestGPUTrainingMatchesPyTorch is train/golden_test.go's check on the
// GPU: every fixture's PyTorch trace, first loss to 1e-5 relative, later
// ones to 1e-3, float32.
func TestGPUTrainingMatchesPyTorch(t *testing.T) {
	needGPU(t)
	files, err := filepath.Glob("../../models/*/train_golden.json")
	require.NoError(t, err)
	for _, f := range files {
		var gf struct {
			Model   string `json:"model"`
			Data    string `json:"data"`
			Configs map[string]struct {
				Optimizer      string    `json:"optimizer"`
				LR             float64   `json:"lr"`
				Momentum       float64   `json:"momentum"`
				WeightDecay    float64   `json:"weight_decay"`
				Betas          []float64 `json:"betas"`
				Eps            float64   `json:"eps"`
				GradAccum      int       `json:"grad_accum"`
				MicroBatchSize int       `json:"micro_batch_size"`
				Steps          int       `json:"steps"`
				ClipGradNorm   float64   `json:"clip_grad_norm"`
				Loss           string    `json:"loss"`
				Losses         []float64 `json:"losses"`
			} `json:"configs"`
		}
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		require.NoError(t, json.Unmarshal(b, &gf))
		var names []string
		for k := range gf.Configs {
			names = append(names, k)
		}
		sort.Strings(names)
		dir := filepath.Dir(f)
		for _, name := range names {
			gc := gf.Configs[name]
			t.Run(filepath.Base(dir)+"/"+name, func(t *testing.T) {
				cfg := train.DefaultConfig()
				cfg.Backend = "cuda"
				cfg.Model, cfg.Data = filepath.Join(dir, gf.Model), filepath.Join(dir, gf.Data)
				cfg.Loss, cfg.Optimizer, cfg.LR, cfg.Momentum, cfg.WeightDecay = gc.Loss, gc.Optimizer, gc.LR, gc.Momentum, gc.WeightDecay
				if len(gc.Betas) == 2 {
					cfg.Beta1, cfg.Beta2 = gc.Betas[0], gc.Betas[1]
				}
				if gc.Eps != 0 {
					cfg.Eps = gc.Eps
				}
				cfg.GradAccum, cfg.BatchSize, cfg.Steps, cfg.ClipGradNorm = gc.GradAccum, gc.MicroBatchSize, gc.Steps, gc.ClipGradNorm
				cfg.Shuffle, cfg.LogFormat = false, "json"
				var out bytes.Buffer
				_, err := train.Run(context.Background(), cfg, &out, io.Discard)
				require.NoError(t, err)
				var losses []float64
				dec := json.NewDecoder(&out)
				for dec.More() {
					var r train.StepRecord
					require.NoError(t, dec.Decode(&r))
					losses = append(losses, r.Loss)
				}
				require.Len(t, losses, len(gc.Losses))
				for i, want := range gc.Losses {
					tol := 1e-3
					if i == 0 {
						tol = 1e-5
					}
					assert.LessOrEqual(t, math.Abs(losses[i]-want), tol*math.Abs(want), "step %d: loss %.7f, PyTorch %.7f", i+1, losses[i], want)
				}
			})
		}
	}
}

// TestGPUBF16MatchesPyTorchAutocast is train/amp_golden_test.go's loss
// check on the GPU: the bf16 step's loss is nearer PyTorch autocast's than
// float32's is.
func TestGPUBF16MatchesPyTorchAutocast(t *testing.T) {
	needGPU(t)
	golden, err := tensorio.ReadNPZ("../../models/mlp/amp_golden.npz")
	require.NoError(t, err)
	batch, err := tensorio.ReadNPZ("../../models/mlp/train_case.npz")
	require.NoError(t, err)
	m, err := importer.Load("../../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	step := func(mode string) float64 {
		p, err := train.Build(m, train.ProgramConfig{Backend: "cuda", Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, MixedPrecision: mode})
		require.NoError(t, err)
		res, err := p.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": batch["input"]}, batch["labels"], 1)
		require.NoError(t, err)
		return res.Loss
	}
	lossBF16, lossFP32 := step("bf16"), step("no")
	torchBF16 := float64(golden["loss_bf16"].Float32s()[0])
	torchFP32 := float64(golden["loss_fp32"].Float32s()[0])
	assert.InEpsilon(t, torchFP32, lossFP32, 1e-5, "float32 loss")
	assert.Less(t, math.Abs(lossBF16-torchBF16), math.Abs(torchFP32-torchBF16)/2,
		"bf16 loss %v: autocast's %v, float32's %v", lossBF16, torchBF16, torchFP32)
}

// TestGPUStateStaysOnDevice: a training step moves no state between the
// host and the GPU, and reading the parameters back gives what a CPU run
// of the same steps gives.
func TestGPUStateStaysOnDevice(t *testing.T) {
	needGPU(t)
	m, err := importer.Load("../../models/mlp/mlp_train.onnx")
	require.NoError(t, err)
	batch, err := tensorio.ReadNPZ("../../models/mlp/train_case.npz")
	require.NoError(t, err)
	run := func(be string) (*train.Program, []float64) {
		p, err := train.Build(m, train.ProgramConfig{Backend: be, Loss: train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}})
		require.NoError(t, err)
		var losses []float64
		for range 3 {
			res, err := p.ForwardBackward(context.Background(), map[string]*graph.Tensor{"input": batch["input"]}, batch["labels"], 1)
			require.NoError(t, err)
			losses = append(losses, res.Loss)
		}
		return p, losses
	}
	pg, lg := run("cuda")
	_, lc := run("cpu")
	assert.InDeltaSlice(t, lc, lg, 1e-4)
	tr := pg.StateTraffic()
	assert.Zero(t, tr.ReadBytes+tr.WriteBytes, "no state crossed to the host during steps")
}
