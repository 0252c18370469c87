package train_test

import (
	"context"
	"fmt"
	"log"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

// Pipeline parallelism in the Go API: the transformer fixture (its loss in
// the graph) cut into two stages on two CPU devices of this process, the
// 1F1B schedule, 4 micro-batches of 2 per optimizer step (as GradAccum 4
// in one process); each stage steps its own AdamW over its own parameters.
func ExampleAccelerator_PreparePipeline() {
	ctx := context.Background()
	acc, err := train.NewAccelerator(train.AcceleratorConfig{
		Pipeline: train.PipelineConfig{Stages: 2, MicroBatches: 4, Schedule: "1f1b", Devices: []string{"cpu:0", "cpu:1"}}})
	if err != nil {
		log.Fatal(err)
	}
	m, err := importer.Load("../models/transformer_loss/transformer_loss_train.onnx")
	if err != nil {
		log.Fatal(err)
	}
	pm, err := acc.PreparePipeline(ctx, m, train.LossConfig{Kind: "output", Output: "loss"}, train.PipelineOptions{BatchSize: 2,
		NewOptimizer: func(ps []*optim.Param) (optim.Optimizer, error) {
			return optim.NewAdamW(optim.AdamConfig{LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.05})
		}})
	if err != nil {
		log.Fatal(err)
	}
	defer pm.Close()
	ds, err := data.OpenNPZ("../models/transformer_loss/train_case.npz", data.NPZOptions{NoLabels: true})
	if err != nil {
		log.Fatal(err)
	}
	loader, err := data.NewLoader(ds, data.LoaderConfig{BatchSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	var window []*data.Batch
	var losses []float64
	for epoch := 0; epoch < 3; epoch++ {
		for b, err := range loader.Epoch(ctx, epoch, 0) {
			if err != nil {
				log.Fatal(err)
			}
			if window = append(window, b); len(window) < 4 {
				continue
			}
			loss, err := pm.Step(ctx, window) // forward and backward of 4 micro-batches on the schedule
			if err != nil {
				log.Fatal(err)
			}
			if _, err := pm.ClipGradNorm(1.0); err != nil {
				log.Fatal(err)
			}
			if err := pm.OptimizerStep(); err != nil {
				log.Fatal(err)
			}
			losses = append(losses, loss)
			window = window[:0]
		}
	}
	fmt.Printf("%d stages, schedule %s, %d optimizer steps, loss fell: %v\n",
		len(pm.Plan.Stages), pm.Schedule.Name, acc.Step(), losses[len(losses)-1] < losses[0])
	// Output: 2 stages, schedule 1f1b, 3 optimizer steps, loss fell: true
}
