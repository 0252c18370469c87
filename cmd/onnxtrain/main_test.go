package main

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strconv"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/train"
)

// The default job trains the bundled model and learns something: the
// accuracy it reports is well above chance (10%).
func TestDefaultJobTrains(t *testing.T) {
	testutil.SkipShort(t, "trains for a few seconds")
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs(nil)
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	require.NoError(t, cmd.Execute())
	m := regexp.MustCompile(`test accuracy ([0-9.]+)%`).FindStringSubmatch(out.String())
	require.NotNil(t, m, out.String())
	acc, err := strconv.ParseFloat(m[1], 64)
	require.NoError(t, err)
	assert.Greater(t, acc, 70.0, out.String())
}

// Every train flag has a Config field of the same YAML name, so --config
// files and flags cannot drift apart.
func TestTrainFlagsMatchConfig(t *testing.T) {
	fields := map[string]bool{}
	ty := reflect.TypeOf(train.Config{})
	for i := 0; i < ty.NumField(); i++ {
		fields[ty.Field(i).Tag.Get("yaml")] = true
	}
	newTrainCmd().Flags().VisitAll(func(f *pflag.Flag) {
		if f.Name != "config" {
			assert.True(t, fields[f.Name], "flag --%s has no Config field", f.Name)
		}
	})
}

// Flags given on the command line override the YAML file.
func TestConfigFileAndFlagOverride(t *testing.T) {
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "train.yaml")
	require.NoError(t, os.WriteFile(cfgPath, []byte("model: ../../models/mlp/mlp_train.onnx\ndata: ../../models/mlp/train_case.npz\nbatch-size: 8\nsteps: 1\noptimizer: sgd\nlr: 0.05\nshuffle: false\nlog-format: json\n"), 0o644))
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs([]string{"train", "--config", cfgPath, "--steps", "2"})
	cmd.SetOut(&out)
	cmd.SetErr(&bytes.Buffer{})
	require.NoError(t, cmd.Execute())
	lines := bytes.Count(out.Bytes(), []byte("\n"))
	assert.Equal(t, 2, lines, "--steps 2 overrides steps: 1 from the file: %s", out.String())
	assert.Contains(t, out.String(), `"loss":2.2695913`)
}
