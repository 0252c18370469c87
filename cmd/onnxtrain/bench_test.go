package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/bench/benchlib"
)

// runBenchChild runs `onnxtrain bench args...` as a process of its own
// (this test binary acting as the CLI) and returns its stdout.
func runBenchChild(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], append([]string{"bench"}, args...)...)
	cmd.Env = append(os.Environ(), "ONNXTRAIN_TEST_AS_CLI=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("%w: %s", err, lastBytes(stderr.Bytes(), 2000))
	}
	return stdout.String(), nil
}

// runBenchCmd runs `onnxtrain bench args...` and returns its stdout.
func runBenchCmd(t *testing.T, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newBenchCmd()
	cmd.SetArgs(args)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SilenceUsage = true
	cmd.SilenceErrors = true
	err := cmd.Execute()
	return out.String(), err
}

func TestBenchTrainJSON(t *testing.T) {
	out, err := runBenchCmd(t, "--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "8",
		"--steps", "3", "--warmup", "1", "--lr", "0.1", "--log-format", "json")
	require.NoError(t, err, out)
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	for _, key := range []string{"median_step_ms", "mean_step_ms", "p90_step_ms", "samples_per_s", "peak_rss_bytes", "steps", "batch_size", "model"} {
		assert.Contains(t, r, key)
	}
	assert.Equal(t, "mlp_train.onnx", r["model"])
	assert.Equal(t, "train", r["mode"])
	assert.EqualValues(t, 3, r["steps"])
	assert.EqualValues(t, 8, r["batch_size"])
	// 784*64+64 + 64*32+32 + 32*10+10, as PyTorch counts the MLP's parameters.
	assert.EqualValues(t, 52650, r["parameters"])
	assert.Positive(t, r["median_step_ms"])
	assert.GreaterOrEqual(t, r["p90_step_ms"], r["median_step_ms"])
	assert.InEpsilon(t, 8/(r["mean_step_ms"].(float64)/1000), r["samples_per_s"], 1e-9)
	assert.Greater(t, r["peak_rss_bytes"], 1e6)
	// Four SGD steps at lr 0.1 on one fixed batch lower its loss.
	assert.Less(t, r["last_loss"], r["first_loss"])
	// Plain SGD reads parameters and gradients and writes parameters.
	assert.EqualValues(t, 3*4*52650, r["optimizer_bytes"])
	assert.Positive(t, r["optimizer_gbps"])
	assert.LessOrEqual(t, r["optimizer_gbps_min"], r["optimizer_gbps"])
	assert.GreaterOrEqual(t, r["optimizer_gbps_max"], r["optimizer_gbps"])
	assert.Contains(t, r, "median_optimizer_ms")
	assert.GreaterOrEqual(t, r["p90_optimizer_ms"], r["median_optimizer_ms"])
	assert.Positive(t, r["median_update_ms"])
	assert.GreaterOrEqual(t, r["p90_update_ms"], r["median_update_ms"])
}

// TestBenchOptimizerBytes: SGD with momentum and AdamW count the slots
// they read and write (momentum: 5 arrays; AdamW: 7) and report a bandwidth.
func TestBenchOptimizerBytes(t *testing.T) {
	for _, c := range []struct {
		args    []string
		streams int
	}{{[]string{"--momentum", "0.9"}, 5}, {[]string{"--optimizer", "adamw", "--lr", "0.001"}, 7}} {
		args := append([]string{"--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "4", "--steps", "2", "--warmup", "1", "--log-format", "json"}, c.args...)
		out, err := runBenchCmd(t, args...)
		require.NoError(t, err, out)
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		assert.EqualValues(t, c.streams*4*52650, r["optimizer_bytes"], c.args)
		assert.Positive(t, r["optimizer_gbps"], c.args)
	}
}

// TestBenchStream: --stream prints the triad bandwidth as one JSON object
// (and a line of text), and excludes a model.
func TestBenchStream(t *testing.T) {
	out, err := runBenchCmd(t, "--stream", "--steps", "2", "--log-format", "json")
	require.NoError(t, err, out)
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Positive(t, r["triad_gbps"])
	assert.EqualValues(t, 128, r["array_mib"])
	out, err = runBenchCmd(t, "--stream", "--steps", "1")
	require.NoError(t, err, out)
	assert.Contains(t, out, "stream triad: ")
	_, err = runBenchCmd(t, "--stream", "--model", "../../models/mlp/mlp_train.onnx")
	assert.ErrorContains(t, err, "--stream excludes --model")
}

func TestBenchTextAndInference(t *testing.T) {
	out, err := runBenchCmd(t, "--model", "../../models/mlp/mlp_eval.onnx", "--inference", "--batch-size", "4", "--steps", "2", "--warmup", "0")
	require.NoError(t, err, out)
	assert.Contains(t, out, "mlp_eval.onnx (inference, batch 4")
	assert.Contains(t, out, "samples/s")
	assert.Contains(t, out, "peak RSS")
	assert.NotContains(t, out, "optimizer")
}

// A model that computes its own loss from integer inputs: no labels, ints
// drawn in [0, --int-high).
func TestBenchGraphLossWithIntegerInputs(t *testing.T) {
	out, err := runBenchCmd(t, "--model", "../../models/transformer_loss/transformer_loss_train.onnx",
		"--loss", "output:loss", "--optimizer", "adamw", "--lr", "1e-3", "--int-high", "16",
		"--batch-size", "2", "--steps", "1", "--warmup", "0", "--log-format", "json")
	require.NoError(t, err, out)
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.Equal(t, "adamw", r["optimizer"])
	assert.Positive(t, r["last_loss"])
}

func TestBenchCPUProfile(t *testing.T) {
	prof := filepath.Join(t.TempDir(), "cpu.pprof")
	out, err := runBenchCmd(t, "--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "4", "--steps", "2", "--warmup", "1", "--cpuprofile", prof)
	require.NoError(t, err, out)
	assert.Contains(t, out, prof)
	b, err := os.ReadFile(prof)
	require.NoError(t, err)
	require.Greater(t, len(b), 2)
	assert.Equal(t, []byte{0x1f, 0x8b}, b[:2], "pprof profiles are gzip-compressed")
}

func TestBenchGemm(t *testing.T) {
	out, err := runBenchCmd(t, "--gemm", "64,48,32", "--trans-a", "--steps", "3", "--log-format", "json")
	require.NoError(t, err, out)
	var r map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	assert.EqualValues(t, 64, r["m"])
	assert.EqualValues(t, 48, r["n"])
	assert.EqualValues(t, 32, r["k"])
	assert.Equal(t, true, r["trans_a"])
	assert.Equal(t, false, r["trans_b"])
	assert.EqualValues(t, 3, r["reps"])
	g := r["gflops"].(float64)
	require.Positive(t, g)
	assert.InEpsilon(t, 2*64*48*32, g*1e9*r["median_ms"].(float64)/1000, 1e-9)

	out, err = runBenchCmd(t, "--gemm", "16,16,16", "--steps", "2")
	require.NoError(t, err, out)
	assert.Contains(t, out, "GFLOP/s median")
}

func TestBenchErrors(t *testing.T) {
	cases := []struct {
		args []string
		want string
	}{
		{[]string{}, "--model"},
		{[]string{"--gemm", "1,2"}, "M,N,K"},
		{[]string{"--gemm", "4,4,4", "--model", "m.onnx"}, "exclude"},
		{[]string{"--gemm", "4,4,4", "--cpuprofile", "x"}, "--cpuprofile"},
		{[]string{"--model", "m.onnx", "--trans-b"}, "--trans-b"},
		{[]string{"--model", "m.onnx", "--dim", "seq"}, "NAME=SIZE"},
		{[]string{"--model", "m.onnx", "--dim", "seq=0"}, "positive"},
		{[]string{"--model", "m.onnx", "--dim", "seq=2", "--dim", "seq=3"}, "twice"},
		{[]string{"--model", "m.onnx", "--log-format", "xml"}, "xml"},
		{[]string{"--model", "no/such/m.onnx"}, "no/such/m.onnx"},
		{[]string{"--model", "../../models/mlp/mlp_train.onnx", "--loss", "hinge", "--steps", "1"}, "hinge"},
		{[]string{"--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "0"}, "--batch-size"},
	}
	for _, c := range cases {
		_, err := runBenchCmd(t, c.args...)
		if assert.Error(t, err, "%v", c.args) {
			assert.Contains(t, err.Error(), c.want, "%v", c.args)
		}
	}
}

// --op-profile reports kernel time per op type of the timed steps: the
// MLP's ops are there with their calls per step, shares sum to one, each
// rate is read against references measured before the warm-up step and
// after the last timed step, and
// --op-profile-by-node names the nodes. The runs with references are
// processes of their own (runBenchChild): they reset the process's peak
// RSS, which this test process shares with the others, and their peak is
// checked against the model's alone.
func TestBenchOpProfile(t *testing.T) {
	out, err := runBenchChild(t, "--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "8",
		"--steps", "3", "--warmup", "1", "--op-profile", "--log-format", "json")
	require.NoError(t, err, out)
	var r struct {
		OpProfile []struct {
			Op       string  `json:"op"`
			Calls    float64 `json:"calls_per_step"`
			MS       float64 `json:"ms_per_step"`
			Share    float64 `json:"share"`
			GFLOP    float64 `json:"gflop_per_step"`
			GFLOPS   float64 `json:"gflop_per_s"`
			GB       float64 `json:"gb_per_step"`
			GBPS     float64 `json:"gb_per_s"`
			OfGemm   float64 `json:"of_gemm"`
			OfTriad  float64 `json:"of_triad"`
			Roofline float64 `json:"roofline_of_gemm"`
		} `json:"op_profile"`
		RefsJSON map[string]any `json:"op_profile_refs"`
		PeakRSS  int64          `json:"peak_rss_bytes"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &r), out)
	require.NotEmpty(t, r.OpProfile)
	calls := map[string]float64{}
	var share float64
	for i, o := range r.OpProfile {
		calls[o.Op] = o.Calls
		share += o.Share
		assert.GreaterOrEqual(t, o.MS, 0.0)
		if i > 0 {
			assert.LessOrEqual(t, o.MS, r.OpProfile[i-1].MS, "largest first")
		}
	}
	assert.InDelta(t, 1, share, 1e-9)
	// The MLP's forward has one loss node per step.
	assert.Equal(t, 1.0, calls["SoftmaxCrossEntropyLoss"], "%v", calls)

	// The references, measured twice (before the warm-up step and after
	// the last of the three timed steps), and each rate as a fraction of
	// its reference.
	refs := r.RefsJSON
	require.NotNil(t, refs, out)
	assert.Equal(t, 2.0, refs["samples"], "%v", refs)
	gemm, triad := refs["gemm_gflops"].(float64), refs["triad_gbps"].(float64)
	assert.Greater(t, gemm, 0.0)
	assert.Greater(t, triad, 0.0)
	assert.LessOrEqual(t, refs["gemm_gflops_min"].(float64), gemm)
	assert.GreaterOrEqual(t, refs["gemm_gflops_max"].(float64), gemm)
	assert.LessOrEqual(t, refs["triad_gbps_min"].(float64), triad)
	assert.GreaterOrEqual(t, refs["triad_gbps_max"].(float64), triad)
	var products, others int
	for _, o := range r.OpProfile {
		switch {
		case o.GFLOPS > 0:
			products++
			assert.InDelta(t, o.GFLOPS/gemm, o.OfGemm, 1e-9, o.Op)
			// The roofline: the GEMM's time over the longer of it and the
			// bytes' at the triad; the triad's rate only where it binds.
			roof := min(1, (o.GFLOP/gemm)/(o.GB/triad))
			assert.InDelta(t, roof, o.Roofline, 1e-9, o.Op)
			if roof < 1 {
				assert.InDelta(t, o.GB*o.GFLOPS/o.GFLOP/triad, o.OfTriad, 1e-9, o.Op)
			} else {
				assert.Zero(t, o.OfTriad, o.Op)
			}
		case o.GBPS > 0:
			others++
			assert.InDelta(t, o.GBPS/triad, o.OfTriad, 1e-9, o.Op)
			assert.Zero(t, o.OfGemm, o.Op)
		}
	}
	assert.NotZero(t, products, out)
	assert.NotZero(t, others, out)
	if runtime.GOOS == "linux" {
		// The references' 432 MiB are handed back after each sample and
		// the peak reset: the MLP's run (a fresh process) stays far below
		// them.
		assert.Nil(t, refs["peak_rss_includes_refs"], "%v", refs)
		assert.Less(t, r.PeakRSS, int64(300<<20), "peak RSS with the references released")
	}
	out, err = runBenchChild(t, "--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "8",
		"--steps", "2", "--warmup", "1", "--op-profile")
	require.NoError(t, err, out)
	assert.Regexp(t, `references before the warm-up and after the last timed step \(2 samples\): 2048³ GEMM [0-9.]+ GFLOP/s \([0-9.]+-[0-9.]+\), triad [0-9.]+ GB/s`, out)
	// The MLP's products are a batch of 8 against whole weights: with a quick
	// GEMM their bytes cap them (a roofline, and their rate of the triad);
	// with the pure-Go kernels (-tags purego) they are compute-bound.
	assert.Regexp(t, `GFLOP/s  [0-9.]+ of the GEMM( \(its bytes allow 0\.[0-9]+; [0-9.]+ of the triad\))?\n`, out)
	assert.Regexp(t, `GB/s +[0-9.]+ of the triad\n`, out)
	assert.Regexp(t, `\n  below 0.85 of the GEMM \(rows of 0.5 ms a step or more; products whose bytes allow it\): \S.*\n  below 0.50 of the triad`, out)

	out, err = runBenchCmd(t, "--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "8",
		"--steps", "2", "--warmup", "1", "--op-profile-by-node", "--op-profile-refs=false")
	require.NoError(t, err, out)
	assert.Contains(t, out, "kernel time per step")
	assert.Regexp(t, `SoftmaxCrossEntropyLoss \S+ +[0-9.]+ ms`, out)

	// --op-profile-by-shape splits every op by its operands: the products
	// with their attributes (the MLP's first layer: 8 rows of 784 against
	// the 64×784 weight, read transposed), the loss by its logits and
	// labels.
	out, err = runBenchCmd(t, "--model", "../../models/mlp/mlp_train.onnx", "--batch-size", "8",
		"--steps", "2", "--warmup", "1", "--op-profile-by-shape", "--op-profile-refs=false")
	require.NoError(t, err, out)
	assert.Regexp(t, `Gemm\w* in=\[8 784\]x\[64 784\]\S* out=\[8 64\]\S*.* transB=1 +[0-9.]+ ms .* GFLOP/s`, out)
	assert.Regexp(t, `\n +SoftmaxCrossEntropyLoss in=\[8 10\]x\[8\]\S* out=\S+ +[0-9.]+ ms`, out)
}

// The summary under an op profile with references names the rows of half a
// millisecond a step or more under issue 14's bars (products under 0.85 of
// the GEMM, other ops under half the triad), and says none when none is. A
// product whose bytes at the triad cap it under 0.85 of the GEMM (its
// roofline) is held to the triad's bar instead, with its roofline named.
func TestPrintBelowRefs(t *testing.T) {
	rows := []benchlib.OpTime{
		{Op: "MatMulGradB", MS: 400, GFLOPS: 200, OfGemm: 0.95, Roofline: 1},
		{Op: "AttentionSoftmax/qk", MS: 17, GFLOPS: 150, OfGemm: 0.71},
		{Op: "MatMulAddGeluErf", MS: 0.8, GFLOPS: 24, OfGemm: 0.08, Roofline: 0.19, OfTriad: 0.44},
		{Op: "MatMulGradB[4]", MS: 0.9, GFLOPS: 20, OfGemm: 0.07, Roofline: 0.10, OfTriad: 0.7},
		{Op: "Gemm", MS: 40, GFLOPS: 240, OfGemm: 0.80, Roofline: 0.9},
		{Op: "MatMulAdd", MS: 0.3, GFLOPS: 17, OfGemm: 0.08, Roofline: 0.19, OfTriad: 0.3},
		{Op: "LayerNormGradAdd", MS: 10, GBPS: 15, OfTriad: 0.47},
		{Op: "Add", MS: 5, GBPS: 25, OfTriad: 0.8},
		{Op: "Gather", MS: 0.1, GBPS: 1, OfTriad: 0.03},
		{Op: "Identity", MS: 1},
	}
	var out bytes.Buffer
	printBelowRefs(&out, rows)
	assert.Equal(t, "  below 0.85 of the GEMM (rows of 0.5 ms a step or more; products whose bytes allow it): AttentionSoftmax/qk 0.71, Gemm 0.80\n"+
		"  below 0.50 of the triad (rows of 0.5 ms a step or more; with the products whose bytes do not): "+
		"MatMulAddGeluErf 0.44 (a product whose bytes allow 0.19 of the GEMM), LayerNormGradAdd 0.47\n", out.String())
	out.Reset()
	printBelowRefs(&out, rows[:1])
	assert.Equal(t, "  below 0.85 of the GEMM (rows of 0.5 ms a step or more; products whose bytes allow it): none\n"+
		"  below 0.50 of the triad (rows of 0.5 ms a step or more; with the products whose bytes do not): none\n", out.String())
}
