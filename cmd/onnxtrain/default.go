package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/models"
	"github.com/onnxtrain/onnxtrain/train"
)

// defaultConfig is the run `onnxtrain` makes with no arguments: the bundled
// Fashion-MNIST CNN trained on the bundled subset.
func defaultConfig(model, data string) train.Config {
	cfg := train.DefaultConfig()
	cfg.Model, cfg.Data, cfg.ValData = model, data, data
	cfg.Optimizer, cfg.LR, cfg.WeightDecay = "adamw", 2e-3, 0.01
	cfg.BatchSize, cfg.Epochs, cfg.Seed = 64, 3, 0
	cfg.Tuning = tuningOrDefault()
	return cfg
}

// runDefault is what `onnxtrain` does with no arguments.
func runDefault(cmd *cobra.Command) error {
	dir, err := os.MkdirTemp("", "onnxtrain-default-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	model, data, err := models.WriteDefault(dir)
	if err != nil {
		return err
	}
	out := cmd.OutOrStdout()
	fmt.Fprintln(out, "onnxtrain: no command given, so training the bundled Fashion-MNIST CNN on the bundled subset")
	fmt.Fprintln(out, "(6000 training and 1000 test images, 3 epochs, AdamW). See `onnxtrain --help` for everything else.")
	sum, err := train.Run(cmd.Context(), defaultConfig(model, data), out, cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	if sum.LastEval != nil {
		fmt.Fprintf(out, "done: %d steps in %.1f s; test accuracy %.2f%% on %d held-out images\n",
			sum.Steps, sum.Seconds, 100*sum.LastEval.Accuracy, sum.LastEval.Samples)
	}
	return nil
}
