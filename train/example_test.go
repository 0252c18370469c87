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

// The Accelerator loop, accelerate-style, on the MLP fixture: prepare the
// model, optimizer, schedule and data loader, then per batch Forward,
// Backward, clip, step. With GradAccum 2 the optimizer acts every second
// micro-batch; SyncGradients says when.
func ExampleNewAccelerator() {
	ctx := context.Background()
	acc, err := train.NewAccelerator(train.AcceleratorConfig{GradAccum: 2})
	if err != nil {
		log.Fatal(err)
	}
	m, err := importer.Load("../models/mlp/mlp_train.onnx")
	if err != nil {
		log.Fatal(err)
	}
	model, err := acc.PrepareModel(m, train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, train.ModelOptions{})
	if err != nil {
		log.Fatal(err)
	}
	sgd, err := optim.NewSGD(optim.SGDConfig{LR: 0.1, Momentum: 0.9})
	if err != nil {
		log.Fatal(err)
	}
	opt := acc.PrepareOptimizer(sgd, model)
	sched := acc.PrepareScheduler(optim.ConstantWarmup{Base: 0.1}, opt)
	ds, err := data.OpenNPZ("../models/mlp/train_case.npz", data.NPZOptions{Labels: "labels", Inputs: model.Prog.DataInputs})
	if err != nil {
		log.Fatal(err)
	}
	loader, err := acc.PrepareDataLoader(ds, data.LoaderConfig{BatchSize: 2})
	if err != nil {
		log.Fatal(err)
	}
	for epoch := 0; epoch < 3; epoch++ {
		var sum float64
		var n int
		for batch, err := range loader.Epoch(ctx, epoch) {
			if err != nil {
				log.Fatal(err)
			}
			err = acc.Accumulate(func() error {
				out, err := model.Forward(ctx, batch)
				if err != nil {
					return err
				}
				sum, n = sum+out.Loss, n+1
				if err := acc.Backward(out); err != nil {
					return err
				}
				if acc.SyncGradients() {
					if _, err := acc.ClipGradNorm(model, 1.0); err != nil {
						return err
					}
				}
				if err := opt.Step(); err != nil { // acts at the end of a window
					return err
				}
				sched.Step()
				opt.ZeroGrad()
				return nil
			})
			if err != nil {
				log.Fatal(err)
			}
		}
		fmt.Printf("epoch %d: %d optimizer steps, mean loss %.2f\n", epoch, acc.Step(), sum/float64(n))
	}
	// Output:
	// epoch 0: 2 optimizer steps, mean loss 2.27
	// epoch 1: 4 optimizer steps, mean loss 1.97
	// epoch 2: 6 optimizer steps, mean loss 1.52
}
