package main

import (
	"context"
	"fmt"
	"sort"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
	"github.com/onnxtrain/onnxtrain/tensorio"
)

func newRunCmd() *cobra.Command {
	var modelPath, inputPath, outputPath, backendName string
	cmd := &cobra.Command{
		Use:   "run --model MODEL.onnx --input X.npz [--output Y.npz]",
		Short: "Run inference: arrays in the input .npz feed graph inputs by name; outputs are written by name",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if modelPath == "" || inputPath == "" {
				return fmt.Errorf("run: --model and --input are required")
			}
			m, err := importer.Load(modelPath)
			if err != nil {
				return err
			}
			feeds, err := tensorio.ReadNPZ(inputPath)
			if err != nil {
				return err
			}
			// run_extra.go: labels and other arrays the graph does not
			// read are left out (and named); a fixed-batch export opens to
			// the fed batch size.
			if feeds, err = prepareRun(m, feeds, cmd.ErrOrStderr()); err != nil {
				return fmt.Errorf("run %s: %w", modelPath, err)
			}
			out, err := runModel(cmd.Context(), m, feeds, backendName)
			if err != nil {
				return fmt.Errorf("run %s: %w", modelPath, err)
			}
			names := make([]string, 0, len(out))
			for k := range out {
				names = append(names, k)
			}
			sort.Strings(names)
			for _, k := range names {
				fmt.Fprintf(cmd.OutOrStdout(), "%s: %v\n", k, out[k])
			}
			if outputPath != "" {
				if err := tensorio.WriteNPZ(outputPath, out); err != nil {
					return err
				}
				fmt.Fprintf(cmd.OutOrStdout(), "wrote %d output(s) to %s\n", len(out), outputPath)
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&modelPath, "model", "", "ONNX model file")
	cmd.Flags().StringVar(&inputPath, "input", "", ".npz (or .npy) file whose arrays are named like the graph inputs")
	cmd.Flags().StringVar(&outputPath, "output", "", ".npz file to write the outputs to")
	cmd.Flags().StringVar(&backendName, "backend", "cpu", "backend to run on")
	return cmd
}

// runModel compiles m and runs it on feeds, checking first that every
// required input is fed and no array is left over.
func runModel(ctx context.Context, m *graph.Model, feeds map[string]*graph.Tensor, backendName string) (map[string]*graph.Tensor, error) {
	if ctx == nil {
		ctx = context.Background()
	}
	want := m.Graph.InputNames()
	wantSet := map[string]bool{}
	for _, n := range want {
		wantSet[n] = true
		if _, ok := feeds[n]; !ok {
			return nil, fmt.Errorf("input %q is not in the input file (the graph needs %v, the file has %v)", n, want, keys(feeds))
		}
	}
	for k := range feeds {
		if !wantSet[k] {
			return nil, fmt.Errorf("array %q in the input file matches no graph input (the graph needs %v)", k, want)
		}
	}
	b, err := backend.Open(backendName)
	if err != nil {
		return nil, err
	}
	exe, err := b.Compile(m, backend.CompileOptions{Tuning: tuningOrDefault()})
	if err != nil {
		return nil, err
	}
	return exe.Run(ctx, feeds)
}

func keys(m map[string]*graph.Tensor) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
