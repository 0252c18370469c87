package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"gopkg.in/yaml.v3"

	"github.com/onnxtrain/onnxtrain/train"
)

// runConfig runs `onnxtrain config ARGS` with the given answers on stdin.
func runConfig(t *testing.T, answers string, args ...string) (string, error) {
	t.Helper()
	var out bytes.Buffer
	cmd := newConfigCmd()
	cmd.SetArgs(args)
	cmd.SetIn(strings.NewReader(answers))
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	err := cmd.Execute()
	return out.String(), err
}

// yamlKeys lists the top-level keys of a YAML file, sorted.
func yamlKeys(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// Every question answered (with one wrong answer of each kind, asked again):
// the file holds model, data and the changed settings only, and loads back
// into the Config the answers describe.
func TestConfigQuestionnaireRoundTrip(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "train.yaml")
	answers := strings.Join([]string{
		"../../models/mlp/mlp_train.onnx", // model
		"",                                // data: needed, asked again
		"../../models/mlp/train_case.npz", // data
		"missing-val.npz",                 // val data: kept, with a warning
		"hinge",                           // loss: not one of the choices
		"mse",                             // loss
		"SGD",                             // optimizer (case does not matter)
		"abc",                             // lr: not a number
		"-1",                              // lr: negative
		"0.05",                            // lr
		"0.9",                             // momentum (asked for sgd only)
		"",                                // weight decay: default
		"2.5",                             // batch size: not a whole number
		"16",                              // batch size
		"3",                               // epochs
		"0",                               // grad accum: must be at least 1
		"4",                               // grad accum
		"1.5",                             // clip grad norm
		"step",                            // schedule
		"10",                              // step size (asked for step only)
		"0.5",                             // gamma
		"100",                             // warmup
		"half",                            // mixed precision: not a choice
		"bf16",                            // mixed precision
		filepath.Join(dir, "run1"),        // output folder
		"json",                            // log format
	}, "\n") + "\n"
	stdout, err := runConfig(t, answers, "--output", out)
	require.NoError(t, err, stdout)

	assert.Contains(t, stdout, "an answer is needed here")
	assert.Contains(t, stdout, "missing-val.npz does not exist")
	assert.Contains(t, stdout, `"hinge" is not one of cross_entropy, mse, l1, bce_with_logits`)
	assert.Contains(t, stdout, `"abc" is not a number`)
	assert.Contains(t, stdout, "-1 must be at least 0")
	assert.Contains(t, stdout, `"2.5" is not a whole number`)
	assert.Contains(t, stdout, "0 must be at least 1")
	assert.Contains(t, stdout, `"half" is not one of no, fp16, bf16`)
	assert.Contains(t, stdout, "onnxtrain train --config "+out)

	want := train.DefaultConfig()
	want.Model = "../../models/mlp/mlp_train.onnx"
	want.Data = "../../models/mlp/train_case.npz"
	want.ValData = "missing-val.npz"
	want.Loss = "mse"
	want.Optimizer = "sgd"
	want.LR = 0.05
	want.Momentum = 0.9
	want.BatchSize = 16
	want.Epochs = 3
	want.GradAccum = 4
	want.ClipGradNorm = 1.5
	want.LRSchedule = "step"
	want.StepSize = 10
	want.Gamma = 0.5
	want.WarmupSteps = 100
	want.MixedPrecision = "bf16"
	want.Output = filepath.Join(dir, "run1")
	want.LogFormat = "json"

	got := train.DefaultConfig()
	require.NoError(t, train.LoadYAML(out, &got))
	assert.Equal(t, want, got)
	assert.Equal(t, []string{"batch-size", "clip-grad-norm", "data", "epochs", "gamma", "grad-accum",
		"log-format", "loss", "lr", "lr-schedule", "mixed-precision", "model", "momentum", "optimizer", "output",
		"step-size", "val-data", "warmup-steps"}, yamlKeys(t, out))

	st, err := os.Stat(out)
	require.NoError(t, err)
	assert.Equal(t, os.FileMode(0o644), st.Mode().Perm())
	leftovers, err := filepath.Glob(filepath.Join(dir, ".*tmp*"))
	require.NoError(t, err)
	assert.Empty(t, leftovers, "the atomic write leaves no temporary file")
}

// Enter (or the end of the input) takes every default: the file holds only
// model, data and the suggested output folder.
func TestConfigDefaultsOnEnterAndEOF(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "train.yaml")
	stdout, err := runConfig(t, "m.onnx\nd.npz\n\n\n", "--output", out)
	require.NoError(t, err, stdout)
	assert.Contains(t, stdout, "m.onnx does not exist")
	assert.Contains(t, stdout, "Batch size (per micro-batch) [32]: ")
	assert.Equal(t, []string{"data", "model", "output"}, yamlKeys(t, out))

	want := train.DefaultConfig()
	want.Model, want.Data, want.Output = "m.onnx", "d.npz", filepath.Join("runs", "m")
	got := train.DefaultConfig()
	require.NoError(t, train.LoadYAML(out, &got))
	assert.Equal(t, want, got)
}

// A question without a default fails once the input ends, and nothing is
// written; so does a wrong last answer.
func TestConfigEndOfInputWithoutAnswer(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "train.yaml")
	_, err := runConfig(t, "", "--output", out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "Model to train")
	assert.Contains(t, err.Error(), "input ended")
	assert.NoFileExists(t, out)

	_, err = runConfig(t, "m.onnx\nd.npz\n\nmse\nsgd\nfast", "--output", out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `"fast" is not a number`)
	assert.NoFileExists(t, out)
}

// An existing file is kept unless --force; a missing folder fails before
// any question.
func TestConfigOutputChecks(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "train.yaml")
	require.NoError(t, os.WriteFile(out, []byte("keep: me\n"), 0o644))
	_, err := runConfig(t, "m.onnx\nd.npz\n", "--output", out)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "exists; use --force")
	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Equal(t, "keep: me\n", string(b))

	_, err = runConfig(t, "m.onnx\nd.npz\n", "--output", out, "--force")
	require.NoError(t, err)
	assert.Equal(t, []string{"data", "model", "output"}, yamlKeys(t, out))

	_, err = runConfig(t, "", "default", "--output", filepath.Join(dir, "no-such-dir", "t.yaml"))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "no-such-dir")
	assert.Contains(t, err.Error(), "does not exist")
}

// `config default` writes every field; loaded over a zero Config it gives
// DefaultConfig exactly (nil slices stay nil).
func TestConfigDefaultWritesEveryField(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "defaults.yaml")
	stdout, err := runConfig(t, "", "default", "--output", out)
	require.NoError(t, err)
	assert.Contains(t, stdout, "onnxtrain train --config "+out)

	var got train.Config
	require.NoError(t, train.LoadYAML(out, &got))
	assert.Equal(t, train.DefaultConfig(), got)

	ty := reflect.TypeOf(train.Config{})
	var names []string
	for i := 0; i < ty.NumField(); i++ {
		if tag := ty.Field(i).Tag.Get("yaml"); tag != "-" { // "-": not a setting (Tuning)
			names = append(names, tag)
		}
	}
	sort.Strings(names)
	assert.Equal(t, names, yamlKeys(t, out))

	b, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.Contains(t, string(b), "# learning rate\nlr: 0.001\n", "each key carries its flag's help")
}

// LoadYAML refuses keys Config does not have (a typo, or a setting that does
// not exist yet), naming the key.
func TestConfigLoadYAMLRefusesUnknownKeys(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "train.yaml")
	_, err := runConfig(t, "", "default", "--output", out)
	require.NoError(t, err)
	f, err := os.OpenFile(out, os.O_APPEND|os.O_WRONLY, 0)
	require.NoError(t, err)
	_, err = f.WriteString("mixed-precison: bf16\n") // misspelt
	require.NoError(t, err)
	require.NoError(t, f.Close())

	cfg := train.DefaultConfig()
	err = train.LoadYAML(out, &cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "mixed-precison")

	require.NoError(t, os.WriteFile(out, []byte("model: m.onnx\nbatchsize: 8\n"), 0o644))
	err = train.LoadYAML(out, &cfg)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "batchsize")
}

// End to end: a config made by the questionnaire trains the MLP fixture and
// reproduces PyTorch's per-step losses (models/mlp/train_golden.json,
// "sgd_momentum": SGD lr 0.05 momentum 0.9, batch 8; one step per epoch on
// the 8-sample set, so shuffling changes only the summation order).
func TestConfigTrainsWithPyTorchLosses(t *testing.T) {
	b, err := os.ReadFile("../../models/mlp/train_golden.json")
	require.NoError(t, err)
	var golden struct {
		Configs map[string]struct {
			Losses []float64 `json:"losses"`
		} `json:"configs"`
	}
	require.NoError(t, json.Unmarshal(b, &golden))
	want := golden.Configs["sgd_momentum"].Losses
	require.Len(t, want, 6)

	dir := t.TempDir()
	out := filepath.Join(dir, "train.yaml")
	answers := "../../models/mlp/mlp_train.onnx\n../../models/mlp/train_case.npz\n\n\nsgd\n0.05\n0.9\n\n8\n6\n\n\n\n\n\nnone\njson\n"
	stdout, err := runConfig(t, answers, "--output", out)
	require.NoError(t, err, stdout)

	var trainOut bytes.Buffer
	root := newRootCmd()
	root.SetArgs([]string{"train", "--config", out})
	root.SetOut(&trainOut)
	root.SetErr(&bytes.Buffer{})
	require.NoError(t, root.Execute())

	var losses []float64
	for _, line := range strings.Split(strings.TrimSpace(trainOut.String()), "\n") {
		var rec map[string]any
		require.NoError(t, json.Unmarshal([]byte(line), &rec), line)
		if l, ok := rec["loss"].(float64); ok {
			if _, isStep := rec["step"]; isStep {
				losses = append(losses, l)
			}
		}
	}
	require.Len(t, losses, len(want), trainOut.String())
	for i := range want {
		assert.InEpsilon(t, want[i], losses[i], 1e-4, "step %d", i+1)
	}
}
