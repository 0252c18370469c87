package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"

	"github.com/sirupsen/logrus"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/train"
	"github.com/onnxtrain/onnxtrain/train/data"
	"github.com/onnxtrain/onnxtrain/train/optim"
)

func main() {
	modelPath := flag.String("model", "models/cifar_resnet/cifar_resnet_train.onnx", "ONNX model exported in training mode")
	dataPath := flag.String("data", "models/cifar_resnet/train_case.npz", ".npz with the graph's inputs and labels")
	steps := flag.Int("steps", 10, "optimizer steps")
	out := flag.String("output", "", "folder for the fine-tuned model (default: a new temporary folder)")
	flag.Parse()
	if *out == "" {
		dir, err := os.MkdirTemp("", "finetuned-")
		if err != nil {
			log.Fatal(err)
		}
		*out = dir
	}
	res, err := run(*modelPath, *dataPath, *steps, *out)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("saved", res.Paths)
}

// result is what a run produced: the loss of each optimizer step (the
// last micro-batch's, as printed) and the files SaveModel wrote.
type result struct {
	Losses []float64
	Paths  []string
}

func run(modelPath, dataPath string, steps int, outDir string) (*result, error) {
	res := &result{}
	ctx := context.Background()
	logger := logrus.New()
	logger.SetOutput(os.Stderr)

	acc, err := train.NewAccelerator(train.AcceleratorConfig{GradAccum: 2, Seed: 0, Log: logger})
	if err != nil {
		return nil, err
	}
	m, err := importer.Load(modelPath)
	if err != nil {
		return nil, err
	}
	model, err := acc.PrepareModel(m, train.LossConfig{Kind: "cross_entropy", IgnoreIndex: -100}, train.ModelOptions{})
	if err != nil {
		return nil, err
	}
	adamw, err := optim.NewAdamW(optim.AdamConfig{LR: 3e-4, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.05})
	if err != nil {
		return nil, err
	}
	opt := acc.PrepareOptimizer(adamw, model)
	ds, err := data.OpenNPZ(dataPath, data.NPZOptions{Labels: "labels", Inputs: model.Prog.DataInputs})
	if err != nil {
		return nil, err
	}
	loader, err := acc.PrepareDataLoader(ds, data.LoaderConfig{BatchSize: 4, Shuffle: true})
	if err != nil {
		return nil, err
	}
	sched := acc.PrepareScheduler(optim.CosineWarmup{Base: 3e-4, WarmupSteps: 2, TotalSteps: steps}, opt)

	for epoch := 0; acc.Step() < steps; epoch++ {
		for batch, err := range loader.Epoch(ctx, epoch) {
			if err != nil {
				return nil, err
			}
			err = acc.Accumulate(func() error {
				out, err := model.Forward(ctx, batch)
				if err != nil {
					return err
				}
				if err := acc.Backward(out); err != nil {
					return err
				}
				if acc.SyncGradients() {
					norm, err := acc.ClipGradNorm(model, 1.0)
					if err != nil {
						return err
					}
					acc.Print("step %d  loss %.4f  grad_norm %.3f  lr %.2e", acc.Step()+1, out.Loss, norm, sched.LR())
					res.Losses = append(res.Losses, out.Loss)
				}
				if err := opt.Step(); err != nil {
					return err
				}
				sched.Step()
				opt.ZeroGrad()
				return nil
			})
			if err != nil {
				return nil, err
			}
			if acc.Step() >= steps {
				break
			}
		}
	}
	if res.Paths, err = acc.SaveModel(outDir); err != nil {
		return nil, err
	}
	return res, nil
}
