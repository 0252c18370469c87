package main

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// `onnxtrain bench --recompute` builds the step with recomputation: the
// same losses, step for step, and a smaller memory plan on the CNN.
func TestBenchRecompute(t *testing.T) {
	results := map[bool]map[string]any{}
	for _, rc := range []bool{false, true} {
		args := []string{"--model", "../../models/cifar_resnet/cifar_resnet_train.onnx", "--batch-size", "8",
			"--steps", "2", "--warmup", "1", "--log-format", "json"}
		if rc {
			args = append(args, "--recompute")
		}
		out, err := runBenchCmd(t, args...)
		require.NoError(t, err, out)
		var r map[string]any
		require.NoError(t, json.Unmarshal([]byte(out), &r), out)
		require.Contains(t, r, "planned_peak_bytes")
		results[rc] = r
	}
	assert.Equal(t, true, results[true]["recompute"])
	assert.NotContains(t, results[false], "recompute")
	assert.Equal(t, results[false]["first_loss"], results[true]["first_loss"])
	assert.Equal(t, results[false]["last_loss"], results[true]["last_loss"])
	assert.Less(t, results[true]["planned_peak_bytes"].(float64), 0.8*results[false]["planned_peak_bytes"].(float64))
}
