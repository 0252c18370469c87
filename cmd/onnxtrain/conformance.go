package main

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/backend/conformance"
)

func newConformanceCmd() *cobra.Command {
	var backendName, testdata, run string
	var asJSON, primitivesOnly bool
	var rtol, atol float64
	cmd := &cobra.Command{
		Use:   "conformance --backend cpu --testdata DIR [--primitives-only]",
		Short: "Run the ONNX backend test cases under DIR and report pass, fail or skip per case",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if testdata == "" {
				testdata = conformance.TestdataDir()
				if testdata == "" {
					return fmt.Errorf("conformance: --testdata is required")
				}
			}
			b, err := backend.Open(backendName)
			if err != nil {
				return err
			}
			opts := conformance.Options{RTol: rtol, ATol: atol}
			opts.Compile.Tuning = tuningOrDefault()
			opts.Compile.PrimitivesOnly = primitivesOnly
			if run != "" {
				if opts.Run, err = regexp.Compile(run); err != nil {
					return fmt.Errorf("conformance: --run: %w", err)
				}
			}
			out := cmd.OutOrStdout()
			enc := json.NewEncoder(out)
			results, err := conformance.Run(b, testdata, opts, func(r conformance.Result) {
				if asJSON {
					enc.Encode(r)
				} else {
					fmt.Fprintln(out, r.String())
				}
			})
			if err != nil {
				return err
			}
			p, f, s := conformance.Summary(results)
			if asJSON {
				enc.Encode(map[string]int{"passed": p, "failed": f, "skipped": s})
			} else {
				fmt.Fprintln(out, conformance.FormatSummary(results))
			}
			if f > 0 {
				return &exitError{code: 1, msg: fmt.Sprintf("%d case(s) failed", f)}
			}
			return nil
		},
	}
	cmd.Flags().StringVar(&backendName, "backend", "cpu", "backend to test")
	cmd.Flags().StringVar(&testdata, "testdata", "", "folder of cases (each with model.onnx and test_data_set_N); default testdata/onnx in the repository (or $ONNX_TESTDATA, or ../shared/onnx/testdata)")
	cmd.Flags().StringVar(&run, "run", "", "only cases whose name matches this regexp")
	cmd.Flags().BoolVar(&asJSON, "json", false, "one JSON object per case, then a summary object")
	cmd.Flags().BoolVar(&primitivesOnly, "primitives-only", false, "restrict the backend to its primitive and extended kernels (every other op lowered, no fused kernels; docs/primitives.md)")
	cmd.Flags().Float64Var(&rtol, "rtol", 1e-3, "relative tolerance")
	cmd.Flags().Float64Var(&atol, "atol", 1e-5, "absolute tolerance")
	return cmd
}
