package main

import (
	"encoding/csv"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

func newPredictCmd() *cobra.Command {
	cfg := train.DefaultConfig()
	var output string
	cmd := &cobra.Command{
		Use:   "predict --model MODEL.onnx --data DATA --output preds.npz|preds.csv",
		Short: "Predict: the model output for every sample, in data order, with the predicted class, its probability and its name where known",
		Long: `Predict: run the model (in inference mode) over the data, in order.

For a classifier ([batch, classes] output) every sample gets the predicted
class (argmax), its softmax probability and, where known, its name: from
classes.json next to the model (written by training on an image folder) or
from the data's class folders. Labels in the data are not needed and not
used.

--output preds.npz holds "output" (the raw model output), and for a
classifier "prediction" (int64) and "probability" (float32); preds.csv has
one row per sample (index, source file for image folders, prediction, class
name, probability; or the raw output values).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if output == "" {
				return fmt.Errorf("predict: --output preds.npz or preds.csv is required")
			}
			lower := strings.ToLower(output)
			if !strings.HasSuffix(lower, ".npz") && !strings.HasSuffix(lower, ".csv") {
				return fmt.Errorf("predict: --output %s: want a .npz or .csv file", output)
			}
			cfg.Tuning = tuningOrDefault()
			p, err := train.Predict(cmd.Context(), cfg)
			if err != nil {
				return err
			}
			for _, n := range p.Notes {
				fmt.Fprintln(cmd.ErrOrStderr(), n)
			}
			if strings.HasSuffix(lower, ".npz") {
				arrays := map[string]*graph.Tensor{"output": p.Output}
				if p.Classes != nil {
					arrays["prediction"] = graph.FromInt64(p.Classes, len(p.Classes))
					arrays["probability"] = graph.FromFloat32(p.Probability, len(p.Probability))
				}
				err = tensorio.WriteNPZ(output, arrays)
			} else {
				err = writePredictionsCSV(output, p)
			}
			if err != nil {
				return fmt.Errorf("predict: %w", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d predictions to %s\n", p.Output.Shape[0], output)
			return nil
		},
	}
	addEvalDataFlags(cmd.Flags(), &cfg)
	cmd.Flags().StringVar(&output, "output", "", "file to write: .npz or .csv")
	return cmd
}

func writePredictionsCSV(path string, p *train.Predictions) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	header := []string{"index"}
	if p.Sources != nil {
		header = append(header, "source")
	}
	n := p.Output.Shape[0]
	row := p.Output.Size() / max(n, 1)
	if p.Classes != nil {
		header = append(header, "prediction")
		if p.Names != nil {
			header = append(header, "class")
		}
		header = append(header, "probability")
	} else {
		for j := 0; j < row; j++ {
			header = append(header, fmt.Sprintf("output_%d", j))
		}
	}
	w.Write(header)
	for i := 0; i < n; i++ {
		rec := []string{strconv.Itoa(i)}
		if p.Sources != nil {
			rec = append(rec, p.Sources[i])
		}
		if p.Classes != nil {
			rec = append(rec, strconv.FormatInt(p.Classes[i], 10))
			if p.Names != nil {
				rec = append(rec, p.Names[i])
			}
			rec = append(rec, strconv.FormatFloat(float64(p.Probability[i]), 'g', 6, 32))
		} else {
			for j := 0; j < row; j++ {
				rec = append(rec, strconv.FormatFloat(p.Output.Float(i*row+j), 'g', 7, 64))
			}
		}
		w.Write(rec)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
