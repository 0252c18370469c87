package main

import (
	"strings"

	"github.com/spf13/pflag"
)

// underscoreFlags makes every flag answer to its name with underscores
// for dashes (--batch_size, --nproc_per_node), the spelling of torchrun,
// accelerate and argparse-based scripts.
func underscoreFlags(_ *pflag.FlagSet, name string) pflag.NormalizedName {
	return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
}
