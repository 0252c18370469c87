package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/onnxtrain/onnxtrain/train"
)

// addEvalDataFlags adds the model and data flags eval and predict share.
func addEvalDataFlags(f *pflag.FlagSet, cfg *train.Config) {
	f.StringVar(&cfg.Model, "model", "", "ONNX model (an inference export, or a training graph, which runs in inference mode)")
	f.StringVar(&cfg.Data, "data", "", "data: .npz/.npy, an IDX images file or MNIST-style folder (the t10k split), or an image folder (one sub-folder per class)")
	f.StringVar(&cfg.Labels, "labels", cfg.Labels, "name of the label array in .npz data")
	f.StringVar(&cfg.InputName, "input-name", "", "graph input fed by IDX or image-folder data (default: the model's only input)")
	f.IntVar(&cfg.BatchSize, "batch-size", 64, "samples per forward pass")
	f.StringVar(&cfg.Backend, "backend", cfg.Backend, "backend to run on")
	f.IntVar(&cfg.ImageSize, "image-size", 0, "images: resize to this square size")
	f.IntVar(&cfg.ResizeSize, "resize", 0, "images: resize the shorter side to this, then centre-crop --image-size (torchvision's validation transform; 0: resize to --image-size directly)")
	f.BoolVar(&cfg.Grayscale, "grayscale", false, "images: load as one channel")
	f.Float64SliceVar(&cfg.Mean, "mean", nil, "per-channel mean to subtract (images and IDX)")
	f.Float64SliceVar(&cfg.Std, "std", nil, "per-channel std to divide by (images and IDX)")
	f.IntVar(&cfg.Workers, "workers", 0, "images: decode on this many goroutines (0: one per CPU)")
}

func newEvalCmd() *cobra.Command {
	cfg := train.DefaultConfig()
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "eval --model MODEL.onnx --data DATA [--loss LOSS] [--json]",
		Short: "Evaluate a model on labelled data: loss, and for classification accuracy, top-5 accuracy and a per-class table",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg.Tuning = tuningOrDefault()
			rep, err := train.EvaluateModel(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			for _, n := range rep.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), n)
			}
			if asJSON {
				rep.Notes = nil
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(rep)
			}
			printEval(cmd.OutOrStdout(), rep)
			return nil
		},
	}
	f := cmd.Flags()
	addEvalDataFlags(f, &cfg)
	f.StringVar(&cfg.Loss, "loss", cfg.Loss, "cross_entropy (classification: also accuracy), mse, l1, bce_with_logits, or output:NAME (the graph computes its own loss)")
	f.Int64Var(&cfg.IgnoreIndex, "ignore-index", cfg.IgnoreIndex, "label value cross_entropy ignores")
	f.BoolVar(&asJSON, "json", false, "write the report as one JSON object")
	return cmd
}

func printEval(w io.Writer, r *train.EvalReport) {
	fmt.Fprintf(w, "%s on %s: %d samples\n", r.Model, r.Data, r.Samples)
	fmt.Fprintf(w, "loss (%s)      %.6f\n", r.Loss, r.Value)
	if r.Accuracy == nil {
		return
	}
	fmt.Fprintf(w, "accuracy           %.2f%%\n", 100**r.Accuracy)
	if r.Top5Accuracy != nil {
		fmt.Fprintf(w, "top5_accuracy      %.2f%%\n", 100**r.Top5Accuracy)
	}
	width := len("class")
	for _, row := range r.PerClass {
		width = max(width, len(row.Class))
	}
	fmt.Fprintf(w, "\n%-*s  %7s  %7s  %9s  %6s\n", width, "class", "support", "correct", "precision", "recall")
	for _, row := range r.PerClass {
		fmt.Fprintf(w, "%-*s  %7d  %7d  %9.4f  %6.4f\n", width, row.Class, row.Support, row.Correct, row.Precision, row.Recall)
	}
	fmt.Fprintf(w, "\nconfusion matrix (rows: true class, columns: predicted class, in the order above)\n")
	for _, line := range r.Confusion {
		cells := make([]string, len(line))
		for j, v := range line {
			cells[j] = fmt.Sprintf("%5d", v)
		}
		fmt.Fprintln(w, strings.Join(cells, " "))
	}
}
