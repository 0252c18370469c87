package main

import (
	"fmt"
	"io"
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
		report(os.Stderr, err)
		os.Exit(exitCode(err))
	}
}

// report writes a command's error as main does, unless the command wrote
// it already (reportNow).
func report(w io.Writer, err error) {
	if e, ok := err.(*exitError); ok && e.reported {
		return
	}
	fmt.Fprintln(w, "onnxtrain:", err)
}

// reportNow writes err (if not nil) to the command's error output as main
// would, and returns it marked as written, with its exit status.
func reportNow(cmd *cobra.Command, err error) error {
	if err == nil {
		return nil
	}
	report(cmd.ErrOrStderr(), err)
	return &exitError{code: exitCode(err), msg: err.Error(), reported: true, cause: err}
}

// exitError carries a chosen exit status.
type exitError struct {
	code int
	msg  string
	// reported: the command has written the error already.
	reported bool
	// cause, if not nil, is the error this one reports (errors.Is and As
	// see it).
	cause error
}

func (e *exitError) Error() string { return e.msg }

// Unwrap is the error reported.
func (e *exitError) Unwrap() error { return e.cause }

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
