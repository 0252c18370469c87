package train

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/onnxtrain/onnxtrain/distrib"
	"github.com/onnxtrain/onnxtrain/pipeline"
	"github.com/onnxtrain/onnxtrain/train/data"
)

// pipelineEvalChunk is how many validation batches one forward-only run
// of the stages takes (bounds what a process holds at once).
const pipelineEvalChunk = 8

// evaluatePipeline is --val-data with pipelining: the validation batches
// through the stages in inference mode (pipeline.Runner.Evaluate), each
// replica taking every replicas-th batch; the loss (mean over the
// examples) and, for cross entropy, the accuracy, summed over the
// processes holding the last stage, as Evaluate computes them in one
// process.
func evaluatePipeline(ctx context.Context, runner *pipeline.Runner, val *data.Loader, group *distrib.Group, lc LossConfig, replicas, replica, epoch, step int) (EvalRecord, error) {
	rec := EvalRecord{Epoch: epoch, Step: step, HasAccuracy: lc.Kind == "cross_entropy"}
	var lossSum float64
	correct := 0
	var chunk []*data.Batch
	flush := func() error {
		if len(chunk) == 0 {
			return nil
		}
		res, err := runner.Evaluate(ctx, pipelineBatches(chunk))
		if err != nil {
			return err
		}
		for i, r := range res {
			b := chunk[i]
			n := b.Size - b.Padding
			lossSum += r.Loss * float64(n)
			rec.Samples += n
			if rec.HasAccuracy && r.Output != nil && b.Labels != nil {
				correct += countCorrect(r.Output, b.Labels)
			}
		}
		chunk = chunk[:0]
		return nil
	}
	i := 0
	for b, err := range val.Epoch(ctx, 0, 0) {
		if err != nil {
			return rec, err
		}
		if i%replicas == replica {
			chunk = append(chunk, b)
			if len(chunk) == pipelineEvalChunk {
				if err := flush(); err != nil {
					return rec, err
				}
			}
		}
		i++
	}
	if err := flush(); err != nil {
		return rec, err
	}
	if group != nil {
		type part struct {
			Loss             float64
			Correct, Samples int
		}
		blob, err := json.Marshal(part{lossSum, correct, rec.Samples})
		if err != nil {
			return rec, err
		}
		parts, err := group.AllGatherObject(ctx, blob)
		if err != nil {
			return rec, fmt.Errorf("pipeline: gathering the validation loss: %w", err)
		}
		lossSum, correct, rec.Samples = 0, 0, 0
		for _, b := range parts {
			var p part
			if err := json.Unmarshal(b, &p); err != nil {
				return rec, err
			}
			lossSum, correct, rec.Samples = lossSum+p.Loss, correct+p.Correct, rec.Samples+p.Samples
		}
	}
	if rec.Samples > 0 {
		rec.Loss = lossSum / float64(rec.Samples)
		rec.Accuracy = float64(correct) / float64(rec.Samples)
	}
	return rec, nil
}

// logEval writes a validation record as Run does.
func logEval(out io.Writer, cfg Config, e EvalRecord) error {
	if cfg.LogFormat == "json" {
		if !e.HasAccuracy {
			return writeJSONLine(out, lossOnlyEval{Epoch: e.Epoch, Step: e.Step, Loss: e.Loss, Samples: e.Samples})
		}
		return writeJSONLine(out, e)
	}
	at := fmt.Sprintf("epoch %d", e.Epoch)
	if cfg.EvalEvery > 0 {
		at += fmt.Sprintf("  step %d", e.Step)
	}
	if !e.HasAccuracy {
		_, err := fmt.Fprintf(out, "%s  val_loss %.5f  (%d samples)\n", at, e.Loss, e.Samples)
		return err
	}
	_, err := fmt.Fprintf(out, "%s  val_loss %.5f  val_accuracy %.2f%%  (%d samples)\n", at, e.Loss, 100*e.Accuracy, e.Samples)
	return err
}
