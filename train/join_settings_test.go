package train

import (
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/distrib"
)

func settingsMap(t *testing.T, tc Config) map[string]string {
	t.Helper()
	list, err := joinSettings(tc)
	require.NoError(t, err)
	m := map[string]string{}
	for _, s := range list {
		_, dup := m[s.Name]
		require.False(t, dup, "%s listed twice", s.Name)
		m[s.Name] = s.Value
	}
	return m
}

// TestJoinSettings: what a rank sends to be compared at join.
func TestJoinSettings(t *testing.T) {
	tc := DefaultConfig()
	tc.Model, tc.Data = "../models/mlp/mlp_train.onnx", "../models/mlp/train_case.npz"
	tc.LR, tc.GradAccum, tc.Zero, tc.Mean = 0.002, 4, 1, []float64{0.5, 0.25}
	tc.Output, tc.LogDir, tc.Resume = "/per/rank/out", "/per/rank/logs", "latest"
	m := settingsMap(t, tc)

	b, err := os.ReadFile(tc.Model)
	require.NoError(t, err)
	sum := sha256.Sum256(b)
	assert.Equal(t, hex.EncodeToString(sum[:]), m["--model (SHA-256)"])
	b, err = os.ReadFile(tc.Data)
	require.NoError(t, err)
	sum = sha256.Sum256(b)
	assert.Equal(t, "SHA-256 "+hex.EncodeToString(sum[:]), m["--data"], "a small data file is compared by content")
	for name, want := range map[string]string{
		"--lr": "0.002", "--grad-accum": "4", "--zero": "1", "--optimizer": "adamw", "--batch-size": "32",
		"--mixed-precision": "no", "--seed": "0", "--loss": "cross_entropy", "--lr-schedule": "constant",
		"--mean": "[0.5,0.25]", "--shuffle": "true", "--pipeline-stages": "0", "--schedule": tc.Schedule,
	} {
		assert.Equal(t, want, m[name], name)
	}
	assert.NotEmpty(t, m["onnxtrain version"])
	assert.Equal(t, "auto", m["ONNXTRAIN_WINOGRAD"], "the Winograd policy changes the rounding: compared")
	tc.Tuning.Winograd = backend.WinogradOff
	assert.Equal(t, "off", settingsMap(t, tc)["ONNXTRAIN_WINOGRAD"])
	for _, name := range []string{"--output", "--log-dir", "--resume", "--dist-secret-file", "--dist-timeout", "--model"} {
		assert.NotContains(t, m, name, "%s may differ between ranks", name)
	}

	// Every field of Config is compared, or named as one that may differ.
	ty := reflect.TypeOf(Config{})
	for i := 0; i < ty.NumField(); i++ {
		name, _, _ := strings.Cut(ty.Field(i).Tag.Get("yaml"), ",")
		_, compared := m["--"+name]
		if name == "data" || name == "val-data" {
			continue // compared by content, under its own name
		}
		if name == "-" {
			continue // not a setting: compile options from the environment (Tuning)
		}
		assert.True(t, compared != perRankFields[name], "--%s: compared %v, listed as per-rank %v", name, compared, perRankFields[name])
	}

	// A folder of images: its files and bytes.
	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "cat"), 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cat", "a.png"), make([]byte, 10), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "cat", "b.png"), make([]byte, 5), 0o644))
	assert.Equal(t, filepath.Base(dir)+"/ (2 files, 15 bytes)", dataIdentity(dir))
}

func TestPrepareJoinSecretFile(t *testing.T) {
	tc := DefaultConfig()
	tc.Model, tc.Data = "../models/mlp/mlp_train.onnx", "../models/mlp/train_case.npz"
	file := filepath.Join(t.TempDir(), "secret")
	require.NoError(t, os.WriteFile(file, []byte("mounted-secret-0123456789\n"), 0o600))
	tc.DistSecretFile = file
	var cfg distrib.Config
	require.NoError(t, prepareJoin(&cfg, tc))
	assert.Equal(t, []byte("mounted-secret-0123456789"), cfg.Secret, "the trailing newline is not part of it")
	assert.NotEmpty(t, cfg.Settings)
	assert.NotNil(t, cfg.Logger)

	require.NoError(t, os.WriteFile(file, []byte("short\n"), 0o600))
	err := prepareJoin(&distrib.Config{}, tc)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "--dist-secret-file: distrib: the secret file "+file+" holds 5 bytes; a secret needs at least 16")
}
