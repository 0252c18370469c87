package train_test

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/train"
)

// tokenGolden is models/gpt/tokens_golden.json, written by
// models/gpt/export_gpt.py --small --golden: PyTorch's AdamW losses training
// the small GPT export from the uint16 token file tokens.bin, cut into
// windows as nanoGPT's get_batch cuts them, in order.
type tokenGolden struct {
	Model       string    `json:"model"`
	Data        string    `json:"data"`
	TokenDType  string    `json:"token_dtype"`
	Windows     int       `json:"windows"`
	BatchSize   int       `json:"batch_size"`
	LR          float64   `json:"lr"`
	Betas       []float64 `json:"betas"`
	Eps         float64   `json:"eps"`
	WeightDecay float64   `json:"weight_decay"`
	Steps       int       `json:"steps"`
	Losses      []float64 `json:"losses"`
}

// TestTrainGPTFromTokenFile trains the small GPT export from a .bin token
// file (the path of `onnxtrain train --data tokens.bin --loss output:loss`):
// the token windows feed "tokens", the next-token windows "targets", and
// the losses follow PyTorch's.
func TestTrainGPTFromTokenFile(t *testing.T) {
	var g tokenGolden
	b, err := os.ReadFile("../models/gpt/tokens_golden.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &g))
	require.Len(t, g.Losses, g.Steps)

	cfg := gptTokenConfig(g)
	var out bytes.Buffer
	sum, err := train.Run(context.Background(), cfg, &out, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, g.Steps, sum.Steps)
	dec := json.NewDecoder(&out)
	var recs []train.StepRecord
	for dec.More() {
		var r train.StepRecord
		require.NoError(t, dec.Decode(&r))
		recs = append(recs, r)
	}
	require.Len(t, recs, g.Steps)
	for i, want := range g.Losses {
		tol := 1e-3
		if i == 0 {
			tol = 1e-5
		}
		assert.LessOrEqual(t, math.Abs(recs[i].Loss-want), tol*math.Abs(want), "step %d: loss %.7f, PyTorch %.7f", i+1, recs[i].Loss, want)
	}
}

func gptTokenConfig(g tokenGolden) train.Config {
	cfg := train.DefaultConfig()
	cfg.Model = "../models/gpt/" + g.Model
	cfg.Data = "../models/gpt/" + g.Data
	cfg.TokenDType = g.TokenDType
	cfg.Loss = "output:loss"
	cfg.Optimizer = "adamw"
	cfg.LR = g.LR
	cfg.Beta1, cfg.Beta2 = g.Betas[0], g.Betas[1]
	cfg.Eps = g.Eps
	cfg.WeightDecay = g.WeightDecay
	cfg.BatchSize = g.BatchSize
	cfg.Steps = g.Steps
	cfg.Shuffle = false
	cfg.LogFormat = "json"
	return cfg
}

// TestTokenFileErrors: a --seq-len that contradicts the graph is named, and
// a uint16 file read as uint32 is caught by the vocabulary check (the
// embedding's 256 rows).
func TestTokenFileErrors(t *testing.T) {
	cfg := gptTokenConfig(tokenGolden{Model: "gpt_small_train.onnx", Data: "tokens.bin", TokenDType: "uint16",
		Betas: []float64{0.9, 0.999}, LR: 1e-3, Eps: 1e-8, BatchSize: 4, Steps: 1})
	cfg.SeqLen = 32
	_, err := train.Run(context.Background(), cfg, io.Discard, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), `--seq-len 32, but the graph input "tokens" has sequence length 16`)

	cfg.SeqLen = 0
	cfg.TokenDType = "uint32" // two uint16 ids make one large uint32
	_, err = train.Run(context.Background(), cfg, io.Discard, io.Discard)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "outside the model's vocabulary of 256")
}
