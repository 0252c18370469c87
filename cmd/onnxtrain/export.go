package main

import (
	"fmt"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/train"
)

func newExportCmd() *cobra.Command {
	var opts train.ExportOptions
	var output string
	cmd := &cobra.Command{
		Use:   "export CHECKPOINT --output model.onnx",
		Short: "Write a checkpoint's model for deployment: the inference graph (BatchNorm with running statistics, Dropout off) with the checkpoint's weights",
		Long: `Write a checkpoint's model for deployment.

CHECKPOINT is a checkpoint folder, or a run's --output folder (its newest
complete checkpoint is used). The graph is the ONNX file the run trained (the
checkpoint records its path; --model overrides it), with the classifier head
the run gave it (--num-classes), in inference mode: BatchNormalization
normalises with the trained running statistics and Dropout is off, so the
result runs in onnxtrain run, onnxruntime or PyTorch's ONNX importers and a
sample's output does not depend on its batch.

--output NAME.onnx writes that file (with --save-training-graph also
NAME.train.onnx); --output FOLDER writes model.onnx and model.safetensors
into it, as a training run's --output does.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" {
				return fmt.Errorf("export: --output is required (a .onnx file or a folder)")
			}
			paths, used, err := train.ExportCheckpoint(args[0], output, opts)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "exported %s: wrote %v\n", used, paths)
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&output, "output", "", "a .onnx file, or a folder for model.onnx and model.safetensors")
	f.StringVar(&opts.Model, "model", "", "the ONNX model the checkpoint's run trained (default: the path the checkpoint records)")
	f.BoolVar(&opts.TrainingGraph, "save-training-graph", false, "also write the training graph (NAME.train.onnx, or model.train.onnx in a folder)")
	return cmd
}
