package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"
	"golang.org/x/sys/cpu"

	"github.com/onnxtrain/onnxtrain/backend"
)

func newEnvCmd() *cobra.Command {
	return &cobra.Command{
		Use:   "env",
		Short: "Print versions, CPU features and the backends found",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "onnxtrain: %s\n", version)
			fmt.Fprintf(w, "go:        %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
			fmt.Fprintf(w, "cpus:      %d (GOMAXPROCS %d)\n", runtime.NumCPU(), runtime.GOMAXPROCS(0))
			if runtime.GOARCH == "amd64" {
				fmt.Fprintf(w, "x86:       avx2=%v fma=%v avx512f=%v\n", cpu.X86.HasAVX2, cpu.X86.HasFMA, cpu.X86.HasAVX512F)
			}
			fmt.Fprintf(w, "backends:  %v\n", backend.Names())
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, d := range bi.Deps {
					fmt.Fprintf(w, "dep:       %s %s\n", d.Path, d.Version)
				}
			}
			return nil
		},
	}
}
