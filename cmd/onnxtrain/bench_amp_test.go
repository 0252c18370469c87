package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// --mixed-precision times the autocast training step, and the memory plan
// of the bf16 and fp16 steps of the CNN is smaller than float32's (its
// activations are half the bytes). A planned size, not a time.
func TestBenchMixedPrecision(t *testing.T) {
	planned := map[string]float64{}
	for _, mode := range []string{"no", "bf16", "fp16"} {
		out, err := runBenchCmd(t, "--model", "../../models/fmnist_cnn/fmnist_cnn_train.onnx", "--batch-size", "16",
			"--steps", "1", "--warmup", "1", "--mixed-precision", mode, "--log-format", "json")
		require.NoError(t, err, out)
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		if mode == "no" {
			assert.NotContains(t, r, "mixed_precision")
		} else {
			assert.Equal(t, mode, r["mixed_precision"])
		}
		require.Contains(t, r, "planned_peak_bytes")
		planned[mode] = r["planned_peak_bytes"].(float64)
	}
	assert.Less(t, planned["bf16"], 0.8*planned["no"], "bf16 plan %v vs float32 %v", planned["bf16"], planned["no"])
	assert.Less(t, planned["fp16"], 0.8*planned["no"], "fp16 plan %v vs float32 %v", planned["fp16"], planned["no"])

	_, err := runBenchCmd(t, "--model", "../../models/mlp/mlp_train.onnx", "--mixed-precision", "fp8")
	assert.ErrorContains(t, err, `--mixed-precision "fp8": want no, bf16 or fp16`)
	_, err = runBenchCmd(t, "--model", "../../models/mlp/mlp_eval.onnx", "--inference", "--mixed-precision", "bf16")
	assert.ErrorContains(t, err, "does not apply with --inference")
}
