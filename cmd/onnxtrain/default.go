package main

import (
	"fmt"

	"github.com/spf13/cobra"
)

// runDefault is what `onnxtrain` does with no arguments.
func runDefault(cmd *cobra.Command) error {
	fmt.Fprintln(cmd.OutOrStdout(), "onnxtrain: no command given; see `onnxtrain --help`")
	return nil
}
