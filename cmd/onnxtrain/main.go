package main

import (
	"fmt"
	"os"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"

	_ "github.com/onnxtrain/onnxtrain/backend/cpu"
	_ "github.com/onnxtrain/onnxtrain/backend/cuda"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	if err := newRootCmd().Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "onnxtrain:", err)
		os.Exit(exitCode(err))
	}
}

// exitError carries a chosen exit status.
type exitError struct {
	code int
	msg  string
}

func (e *exitError) Error() string { return e.msg }

func exitCode(err error) int {
	if e, ok := err.(*exitError); ok {
		return e.code
	}
	return 1
}

func newRootCmd() *cobra.Command {
	var logLevel string
	root := &cobra.Command{
		Use:           "onnxtrain",
		Short:         "Run and train PyTorch-exported ONNX models",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
		PersistentPreRunE: func(cmd *cobra.Command, args []string) error {
			lvl, err := logrus.ParseLevel(logLevel)
			if err != nil {
				return err
			}
			logrus.SetLevel(lvl)
			logrus.SetOutput(os.Stderr)
			if err := checkBackendFlag(cmd); err != nil {
				return err
			}
			_, err = envTuning() // a bad value fails every command early
			return err
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runDefault(cmd)
		},
	}
	// --batch_size is --batch-size, as torchrun and accelerate configs
	// write flags (flagnames.go).
	root.SetGlobalNormalizationFunc(underscoreFlags)
	root.PersistentFlags().StringVar(&logLevel, "log-level", "info", "log level (debug, info, warn, error)")
	root.AddCommand(newInspectCmd(), newRunCmd(), newTrainCmd(), newConfigCmd(), newLaunchCmd(), newBenchCmd(), newEstimateMemoryCmd(), newConformanceCmd(), newEnvCmd(), newExportCmd(), newEvalCmd(), newPredictCmd())
	addDeviceBackendFlags(root)
	return root
}
