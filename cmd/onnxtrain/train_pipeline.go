package main

import (
	"github.com/spf13/pflag"

	"github.com/onnxtrain/onnxtrain/train"
)

// addPipelineTrainFlags adds train's pipeline-parallel flags.
func addPipelineTrainFlags(f *pflag.FlagSet, cfg *train.Config) {
	f.IntVar(&cfg.PipelineStages, "pipeline-stages", 0, "pipeline parallel: cut the model into stages run by this many ranks (0: off)")
	f.IntVar(&cfg.MicroBatches, "micro-batches", 0, "pipeline parallel: micro-batches of --batch-size per run of the schedule (0: --grad-accum, one run a step); with --grad-accum K, K runs make one optimizer step; trains as --grad-accum K×M in one process")
	f.StringVar(&cfg.Schedule, "schedule", "", "pipeline parallel: gpipe, 1f1b (default), interleaved, zb1p or zbv")
	f.IntVar(&cfg.VirtualStages, "virtual-stages", 0, "pipeline parallel: model chunks per rank for --schedule interleaved (0: 2)")
	f.StringVar(&cfg.SplitAt, "split-at", "", "pipeline parallel: cut before these nodes (or the first reader of these initializers), comma-separated, instead of automatically")
	f.StringVar(&cfg.Devices, "devices", "", "pipeline parallel: the device of each rank, e.g. cpu:0,cpu:1 (default cpu:0..cpu:S-1); cpu:0=3,cpu:1=1 sets each CPU device's worker count (default: an even share of the cores)")
	f.StringVar(&cfg.StageMemory, "stage-memory", "", "pipeline parallel: cut only where every stage's estimated memory (parameters, gradients, optimizer state, activations in flight) stays under this, e.g. 4GiB")
	f.StringVar(&cfg.Partition, "partition", "estimate", "pipeline parallel: balance the stages by the cost model (estimate) or by timing the model's pieces on the first micro-batches (profile)")
}
