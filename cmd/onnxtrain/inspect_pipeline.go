package main

import (
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/pipeline"
)

// pipelineInspectFlags are inspect's options for printing a pipeline plan.
type pipelineInspectFlags struct {
	stages      int
	splitAt     []string
	batchSize   int
	stageMemory string
	optimizer   string
}

func addPipelineInspectFlags(cmd *cobra.Command, f *pipelineInspectFlags) {
	cmd.Flags().IntVar(&f.stages, "pipeline-stages", 0, "print how the model would be cut into this many pipeline stages")
	cmd.Flags().StringSliceVar(&f.splitAt, "split-at", nil, "cut before these nodes (or the first reader of these initializers) instead of automatically")
	cmd.Flags().IntVar(&f.batchSize, "batch-size", 1, "micro-batch size the plan's sizes and estimates assume")
	cmd.Flags().StringVar(&f.stageMemory, "stage-memory", "", "limit each stage's estimated memory (e.g. 4GiB, 512MB)")
	cmd.Flags().StringVar(&f.optimizer, "optimizer", "adamw", "optimizer whose state the memory estimate counts (sgd, adam, adamw)")
}

func (f *pipelineInspectFlags) wanted() bool { return f.stages > 0 || len(f.splitAt) > 0 }

// inspectPipeline prints the plan for cutting m into stages.
func inspectPipeline(w io.Writer, m *graph.Model, f pipelineInspectFlags, asJSON bool) error {
	opts := pipeline.PartitionOptions{Stages: f.stages, SplitAt: f.splitAt, BatchSize: f.batchSize}
	switch f.optimizer {
	case "sgd":
		opts.OptimizerSlots = 1
	case "adam", "adamw":
		opts.OptimizerSlots = 2
	default:
		return fmt.Errorf("--optimizer: unknown optimizer %q (want sgd, adam or adamw)", f.optimizer)
	}
	if f.stageMemory != "" {
		n, err := pipeline.ParseBytes(f.stageMemory)
		if err != nil {
			return fmt.Errorf("--stage-memory: %w", err)
		}
		opts.StageMemory = n
	}
	plan, err := pipeline.Partition(m, opts)
	if err != nil {
		return err
	}
	// Activations: what each stage's training graph keeps per micro-batch
	// (the loss is the model's first output), held by 1F1B's S-s.
	if err := plan.RefineMemory(pipeline.StageConfig{}); err != nil {
		return err
	}
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(plan)
	}
	_, err = io.WriteString(w, plan.String())
	return err
}
