//go:build unix

package main

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/internal/testutil"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

const transformerModel, transformerData = "../../models/transformer_loss/transformer_loss_train.onnx", "../../models/transformer_loss/train_case.npz"

// TestPipelineProcessesEqualGradAccum: `onnxtrain launch --nproc-per-node N
// -- onnxtrain train --pipeline-stages S --micro-batches M` (one stage rank
// per process, activations over TCP, N/S data-parallel replicas) logs the
// losses of one process with --grad-accum N/S×M, step for step, and
// --output writes the whole model.
func TestPipelineProcessesEqualGradAccum(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	// Pipeline stages do not run pushdown-gather (their inputs come
	// without shapes); the one-process reference leaves it out too, so
	// that both compute vit_tiny's last block alike.
	t.Setenv(envNoPushDownGather, "1")
	for _, tc := range []struct {
		model, data, loss, schedule, partition string
		procs, stages, micro                   int
		extra                                  []string // for the pipelined run
		both                                   []string // for both runs
	}{
		{vitModel, vitData, "cross_entropy", "zbv", "estimate", 2, 2, 4, nil, nil},
		// process 0 measures the pieces and sends the costs to the others
		{transformerModel, transformerData, "output:loss", "1f1b", "profile", 4, 4, 4, nil, nil},
		// 2 replicas of a 2-stage pipeline: --grad-accum 2×2
		{transformerModel, transformerData, "output:loss", "zb1p", "estimate", 4, 2, 2, nil, nil},
		// and with each stage's AdamW state sharded over its 2 replicas
		{transformerModel, transformerData, "output:loss", "1f1b", "estimate", 4, 2, 2, []string{"--zero", "1"}, nil},
		// and with their averaged gradients sharded too (reduce-scattered)
		{transformerModel, transformerData, "output:loss", "zb1p", "estimate", 4, 2, 2, []string{"--zero", "2"}, nil},
		// fp16: one loss scale, the inf check agreed by the 4 processes
		{transformerModel, transformerData, "output:loss", "zbv", "estimate", 4, 2, 2, []string{"--zero", "1"}, []string{"--mixed-precision", "fp16"}},
		{transformerModel, transformerData, "output:loss", "1f1b", "estimate", 4, 2, 2, []string{"--zero", "2"}, []string{"--mixed-precision", "fp16"}},
	} {
		t.Run(fmt.Sprintf("%s/%d/%d/%s%v%v", filepath.Base(tc.model), tc.procs, tc.stages, tc.schedule, tc.extra, tc.both), func(t *testing.T) {
			common := []string{"train", "--model", tc.model, "--data", tc.data, "--loss", tc.loss, "--optimizer", "adamw", "--lr", "0.001",
				"--weight-decay", "0.05", "--steps", "4", "--shuffle=false", "--log-format", "json", "--batch-size", "2", "--clip-grad-norm", "5"}
			common = append(common, tc.both...)
			ref := t.TempDir()
			want := stepLosses(t, runCLI(t, append(common, "--grad-accum", "4", "--output", ref)...))
			out := t.TempDir()
			args := append(append([]string(nil), common...), "--pipeline-stages", fmt.Sprint(tc.stages), "--micro-batches", fmt.Sprint(tc.micro),
				"--schedule", tc.schedule, "--partition", tc.partition, "--output", out)
			multi := runCLI(t, launched(t, tc.procs, nil, append(args, tc.extra...)...)...)
			assertLossesEqual(t, want, stepLosses(t, multi), "pipelined over processes")
			a, _, err := tensorio.ReadSafetensors(filepath.Join(ref, "model.safetensors"))
			require.NoError(t, err)
			b, _, err := tensorio.ReadSafetensors(filepath.Join(out, "model.safetensors"))
			require.NoError(t, err)
			require.Len(t, b, len(a))
			for name, ta := range a {
				require.Contains(t, b, name)
				fa, fb := ta.Float32s(), b[name].Float32s()
				require.Len(t, fb, len(fa), name)
				// AdamW divides by the gradient's running RMS: where a
				// gradient is near zero, float-order differences in it move
				// the update by a fraction of lr (1e-3); allow a tenth.
				for i := range fa {
					require.InDelta(t, fa[i], fb[i], 1e-4, "%s[%d]", name, i)
				}
			}
		})
	}
}

// TestPipelineSyncBatchNorm: resnet18_small (20 BatchNorms) over 4
// launched processes, 2 replicas × 2 stages, one micro-batch of 2 per
// replica and step, --sync-batchnorm: each BatchNorm normalises with the
// statistics of both replicas' micro-batches, so every step's loss equals
// one process's with --batch-size 4 (the two micro-batches together);
// without --sync-batchnorm it does not.
func TestPipelineSyncBatchNorm(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	common := []string{"train", "--model", "../../models/resnet18_small/resnet18_small_train.onnx", "--data", "../../models/resnet18_small/train_case.npz",
		"--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9", "--steps", "3", "--shuffle=false", "--log-format", "json"}
	want := stepLosses(t, runCLI(t, append(common, "--batch-size", "4")...))
	require.Len(t, want, 3)
	pipe := append(append([]string(nil), common...), "--batch-size", "2", "--pipeline-stages", "2", "--micro-batches", "1")
	assertLossesEqual(t, want, stepLosses(t, runCLI(t, launched(t, 4, nil, append(pipe, "--sync-batchnorm")...)...)), "pipelined with --sync-batchnorm")
	plain := stepLosses(t, runCLI(t, launched(t, 4, nil, pipe...)...))
	require.Len(t, plain, 3)
	assert.NotEqual(t, want[1], plain[1], "without the sync each replica normalises alone")
}

// TestPipelineFaults: a stage process that dies fails the job, naming the
// rank, and the newest checkpoint stays loadable; a wedged one fails it
// within --dist-timeout, naming the silent rank and the awaited stage; with
// --max-restarts 1 the job resumes from the newest checkpoint and ends with
// the uninterrupted run's losses.
func TestPipelineFaults(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	const steps, every = 12, 2
	common := []string{"train", "--model", vitModel, "--data", vitData, "--optimizer", "sgd", "--lr", "0.05", "--momentum", "0.9",
		"--shuffle=false", "--log-format", "json", "--steps", fmt.Sprint(steps), "--batch-size", "4"}
	ref := stepLosses(t, runCLI(t, append(common, "--grad-accum", "2")...))
	require.Len(t, ref, steps)
	prepare := func(t *testing.T) (out string) {
		tmp := t.TempDir()
		out = filepath.Join(tmp, "run")
		t.Setenv(envExitRank, "1")
		t.Setenv(envExitWhen, filepath.Join(out, train.CheckpointName(2*every), train.CheckpointManifestFile)) // the second checkpoint, named by its step
		t.Setenv(envExitMarker, filepath.Join(tmp, "died"))
		return out
	}
	worker := func(out string) []string {
		return append(common, "--pipeline-stages", "2", "--micro-batches", "2", "--schedule", "1f1b",
			"--checkpoint-every", fmt.Sprint(every), "--output", out, "--dist-timeout", "5s")
	}

	t.Run("dies", func(t *testing.T) {
		out := prepare(t)
		stdout, stderr, err := runCLIResult(launched(t, 2, []string{"--grace-period", "5s"}, worker(out)...)...)
		require.Error(t, err, "stdout: %s", stdout)
		msg := err.Error() + "\n" + stderr
		t.Logf("launcher: %v", err)
		assert.Regexp(t, `worker rank 1 \(local rank 1, pid \d+\) failed: exit status 7|rank 1 .*(lost|did not answer|closed)`, msg)
		_, statErr := os.Stat(os.Getenv(envExitMarker))
		require.NoError(t, statErr, "rank 1 did not die: %s", msg)
		latest, err := train.Latest(out)
		require.NoError(t, err, "a complete checkpoint survives")
		st, err := train.LoadState(latest)
		require.NoError(t, err)
		assert.GreaterOrEqual(t, st.Step, 2*every)
		assert.Less(t, st.Step, steps)
	})

	t.Run("hangs", func(t *testing.T) {
		out := prepare(t)
		t.Setenv(envExitMode, "stop")
		args := append(worker(out), "--dist-timeout", "2s")
		_, stderr, err := runCLIResult(launched(t, 2, []string{"--grace-period", "1s"}, args...)...)
		require.Error(t, err)
		t.Logf("launcher: %v\n%s", err, stderr)
		assert.Regexp(t, `worker rank 0 \(local rank 0, pid \d+\) failed: exit status 1`, err.Error(), "the survivor fails by itself")
		assert.Regexp(t, `\[rank 0\] .*(waited 2s for the (activations|gradients) of micro-batch \d+, stage \d+, from rank 1|rank 1 did not answer within 2s)`, stderr)
		latest, err := train.Latest(out)
		require.NoError(t, err)
		_, err = train.LoadState(latest)
		require.NoError(t, err)
	})

	t.Run("restarts", func(t *testing.T) {
		out := prepare(t)
		t.Setenv(envResumeOnRestart, "1")
		stdout, stderr, err := runCLIResult(launched(t, 2, []string{"--max-restarts", "1", "--monitor-interval", "10ms"}, worker(out)...)...)
		require.NoError(t, err, "stderr: %s", stderr)
		_, statErr := os.Stat(os.Getenv(envExitMarker))
		require.NoError(t, statErr, "rank 1 did not die: %s", stderr)
		recs := stepRecords(t, stdout)
		require.NotEmpty(t, recs)
		last := recs[len(recs)-1]
		require.Equal(t, steps, last.Step, stdout)
		for _, r := range recs {
			want := ref[r.Step-1]
			assert.LessOrEqual(t, math.Abs(r.Loss-want), 1e-5*math.Abs(want), "step %d: %.8f, uninterrupted %.8f", r.Step, r.Loss, want)
		}
	})
}

// TestPipelineProcessesTrainOnly: 2 launched processes, one stage each,
// with --train-only (the first stage wholly frozen): each process releases
// the loaded model's parameters, frozen ones included (its stages hold
// their own copies), and rank 0 writes back the frozen ones from the model
// file: the losses, model.safetensors and model.onnx's initializers equal
// one process's with the same flag, and the frozen ones the file's.
func TestPipelineProcessesTrainOnly(t *testing.T) {
	testutil.SkipShort(t, "starts worker processes")
	t.Setenv("ONNXTRAIN_TEST_AS_CLI", "1")
	t.Setenv(envNoPushDownGather, "1") // as in TestPipelineProcessesEqualGradAccum
	common := []string{"train", "--model", vitModel, "--data", vitData, "--optimizer", "adamw", "--lr", "0.001",
		"--steps", "3", "--shuffle=false", "--log-format", "json", "--batch-size", "2", "--train-only", `^(blocks\.1\.|head\.)`}
	ref := t.TempDir()
	want := stepLosses(t, runCLI(t, append(common, "--grad-accum", "4", "--output", ref)...))
	out := t.TempDir()
	got := stepLosses(t, runCLI(t, launched(t, 2, nil, append(common, "--pipeline-stages", "2", "--micro-batches", "4", "--schedule", "1f1b", "--output", out)...)...))
	assertLossesEqual(t, want, got, "pipelined over processes with --train-only")
	a, err := importer.Load(filepath.Join(ref, "model.onnx"))
	require.NoError(t, err)
	b, err := importer.Load(filepath.Join(out, "model.onnx"))
	require.NoError(t, err)
	orig, err := importer.Load(vitModel)
	require.NoError(t, err)
	require.Equal(t, len(a.Graph.Initializers), len(b.Graph.Initializers))
	for name, ta := range a.Graph.Initializers {
		tb := b.Graph.Initializers[name]
		require.NotNil(t, tb, name)
		require.NotNil(t, tb.Data, name)
		if fa, ok := ta.Data.([]float32); ok {
			fb := tb.Float32s()
			require.Len(t, fb, len(fa), name)
			for i := range fa {
				require.InDelta(t, fa[i], fb[i], 1e-5, "%s[%d]", name, i)
			}
		}
	}
	assert.Equal(t, orig.Graph.Initializers["blocks.0.mlp.0.weight"].Float32s(), b.Graph.Initializers["blocks.0.mlp.0.weight"].Float32s(), "frozen")
	assert.NotEqual(t, orig.Graph.Initializers["head.weight"].Float32s(), b.Graph.Initializers["head.weight"].Float32s(), "trained")
}
