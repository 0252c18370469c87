package main

import (
	"bytes"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/pipeline"
)

// `onnxtrain inspect MODEL --pipeline-stages S --json` prints the plan:
// stages with nodes, parameters, estimates and the tensors crossing each
// cut with their sizes.
func TestInspectPipelineStages(t *testing.T) {
	var out bytes.Buffer
	cmd := newRootCmd()
	cmd.SetArgs([]string{"inspect", "../../models/vit_tiny/vit_tiny_train.onnx", "--pipeline-stages", "2", "--batch-size", "8", "--json"})
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	require.NoError(t, cmd.Execute())
	var plan struct {
		Stages []struct {
			Nodes   []string `json:"nodes"`
			Params  []string `json:"params"`
			Outputs []struct {
				Name  string `json:"name"`
				Shape []int  `json:"shape"`
				Bytes int64  `json:"bytes"`
			} `json:"outputs"`
			EstSeconds     float64 `json:"est_seconds"`
			EstMemoryBytes int64   `json:"est_memory_bytes"`
		} `json:"stages"`
	}
	require.NoError(t, json.Unmarshal(out.Bytes(), &plan), out.String())
	require.Len(t, plan.Stages, 2)
	assert.Equal(t, "/patch_embed/Conv", plan.Stages[0].Nodes[0])
	assert.Equal(t, "/head/Gemm", plan.Stages[1].Nodes[len(plan.Stages[1].Nodes)-1])
	require.NotEmpty(t, plan.Stages[0].Outputs)
	for _, o := range plan.Stages[0].Outputs {
		n := int64(4)
		for _, d := range o.Shape {
			n *= int64(d)
		}
		assert.Equal(t, n, o.Bytes, o.Name)
	}
	assert.Empty(t, plan.Stages[1].Outputs)
	assert.Positive(t, plan.Stages[1].EstSeconds)

	out.Reset()
	cmd = newRootCmd()
	cmd.SetArgs([]string{"inspect", "../../models/transformer_loss/transformer_loss_train.onnx", "--split-at", "head.weight"})
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	require.NoError(t, cmd.Execute())
	assert.Contains(t, out.String(), "stage 1: 6 nodes (/head/Transpose .. /SoftmaxCrossEntropyLoss)")
	assert.Contains(t, out.String(), "-> /norm/LayerNormalization_output_0 float32[1,8,16] (512 B)")

	cmd = newRootCmd()
	cmd.SetArgs([]string{"inspect", "../../models/vit_tiny/vit_tiny_train.onnx", "--pipeline-stages", "2", "--stage-memory", "lots"})
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	assert.ErrorContains(t, cmd.Execute(), `--stage-memory: "lots" is not a size`)
}

func TestParseByteSize(t *testing.T) {
	for s, want := range map[string]int64{"4GiB": 4 << 30, "512MB": 512e6, "1.5G": 3 << 29, "1000": 1000, "64 KiB": 64 << 10} {
		got, err := pipeline.ParseBytes(s)
		require.NoError(t, err, s)
		assert.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "-1GB", "GB", "4XB"} {
		_, err := pipeline.ParseBytes(s)
		assert.Error(t, err, s)
	}
}
