package main

import (
	"errors"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"

	"github.com/sirupsen/logrus"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/onnxtrain/onnxtrain/launch"
)

func newLaunchCmd() *cobra.Command {
	var (
		cfg        launch.Config
		nnodes     string
		jsonStdout bool
	)
	cmd := &cobra.Command{
		Use:   "launch --nproc-per-node N [flags] -- PROGRAM [ARGS...]",
		Short: "Start N worker processes of a training command on this node, like torchrun",
		Long: `Start --nproc-per-node workers of PROGRAM on this node with the environment
torchrun gives its workers (MASTER_ADDR, MASTER_PORT, RANK = node_rank*N + local_rank,
WORLD_SIZE = nnodes*N, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK, ONNXTRAIN_RESTART_COUNT),
and supervise them:

  - every line a worker writes is prefixed with "[rank R] "; with --log-format json among
    the worker's arguments, rank 0's stdout passes through unprefixed (one JSON record per
    line) and the other ranks' stdout goes, prefixed, to stderr;
  - SIGINT and SIGTERM are forwarded to the workers (a second one kills them);
  - when a worker fails, the others get SIGTERM (SIGKILL after --grace-period) and the
    launcher exits 1 naming the rank and its exit status; with --max-restarts K it starts
    all its workers again instead, up to K times; a restarted "onnxtrain train" with
    --output continues from its job's newest checkpoint there (as --resume latest).

PROGRAM "onnxtrain" runs this executable. On several machines, start one launcher per
machine with the same --nnodes, --master-addr and --master-port and its own --node-rank,
and give every machine the same secret ($ONNXTRAIN_DIST_SECRET or --dist-secret-file):
the workers' connections prove they hold it, and strangers are refused. On one machine
without a secret, the launcher makes one for its workers.
Each worker gets GOMAXPROCS = CPUs / nproc-per-node unless GOMAXPROCS is set.`,
		Example: `  onnxtrain launch --nproc-per-node 2 -- onnxtrain train --model m.onnx --data d.npz --log-format json
  onnxtrain launch --nnodes 2 --node-rank 0 --master-addr node0 --nproc-per-node 4 \
      --max-restarts 3 -- onnxtrain train --config train.yaml --resume latest`,
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) == 0 {
				return errors.New("launch: no worker command given: put it after --, e.g. `onnxtrain launch --nproc-per-node 2 -- onnxtrain train --model m.onnx --data d.npz`")
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			n, err := parseNNodes(nnodes)
			if err != nil {
				return err
			}
			cfg.NNodes = n
			cfg.Command = args
			cfg.JSONStdout = jsonStdout || launch.WantsJSONStdout(args[1:])
			cfg.Stdout, cfg.Stderr = cmd.OutOrStdout(), cmd.ErrOrStderr()
			log := logrus.New()
			log.Out = cmd.ErrOrStderr()
			log.Level = logrus.GetLevel()
			cfg.Logger = log.WithField("node_rank", cfg.NodeRank)
			// Check the flags before taking over the signals.
			if err := cfg.Validate(); err != nil {
				return err
			}

			sigs := make(chan os.Signal, 2)
			signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
			defer signal.Stop(sigs)
			cfg.Signals = sigs

			err = launch.Run(cmd.Context(), cfg)
			var se *launch.SignalError
			var we *launch.WorkerError
			switch {
			case errors.As(err, &se):
				return &exitError{code: se.ExitCode(), msg: err.Error()}
			case errors.As(err, &we):
				return &exitError{code: 1, msg: err.Error()}
			}
			return err
		},
	}
	f := cmd.Flags()
	// Everything after the program name belongs to the program.
	f.SetInterspersed(false)
	// torchrun spells its flags with underscores (--nproc_per_node); accept both.
	f.SetNormalizeFunc(func(_ *pflag.FlagSet, name string) pflag.NormalizedName {
		return pflag.NormalizedName(strings.ReplaceAll(name, "_", "-"))
	})
	f.IntVar(&cfg.NProcPerNode, "nproc-per-node", 1, "worker processes on this node")
	f.StringVar(&nnodes, "nnodes", "1", "number of nodes, each running one launcher")
	f.IntVar(&cfg.NodeRank, "node-rank", 0, "this node's index, 0..nnodes-1")
	f.StringVar(&cfg.MasterAddr, "master-addr", "", "host of rank 0, reachable from every node (default 127.0.0.1 on one node; required on several)")
	f.IntVar(&cfg.MasterPort, "master-port", 0, fmt.Sprintf("rendezvous port on the master (default: a free port on one node, %d on several)", launch.DefaultMasterPort))
	f.IntVar(&cfg.MaxRestarts, "max-restarts", 0, "restart all local workers up to this many times when one fails")
	f.DurationVar(&cfg.MonitorInterval, "monitor-interval", launch.DefaultMonitorInterval, "pause before restarting failed workers (exits are noticed at once)")
	f.DurationVar(&cfg.GracePeriod, "grace-period", launch.DefaultGracePeriod, "time workers have to exit after SIGTERM before SIGKILL")
	f.StringVar(&cfg.RunID, "run-id", launch.DefaultRunID, "job id given to the workers as TORCHELASTIC_RUN_ID")
	f.StringVar(&cfg.SecretFile, "dist-secret-file", "", "file holding the job's secret, passed to the workers (default: $ONNXTRAIN_DIST_SECRET; on one node without either, the launcher makes one; several nodes need the same one on each)")
	f.BoolVar(&jsonStdout, "json-stdout", false, "pass rank 0's stdout through unprefixed even without --log-format json in the worker's arguments (e.g. when it comes from a --config file)")
	return cmd
}

// parseNNodes reads --nnodes, refusing torchrun's elastic MIN:MAX form with
// a clear message.
func parseNNodes(s string) (int, error) {
	if strings.Contains(s, ":") {
		return 0, fmt.Errorf("launch: --nnodes %s: elastic ranges (MIN:MAX) are not supported; give the number of nodes", s)
	}
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		return 0, fmt.Errorf("launch: --nnodes %q is not a number of nodes", s)
	}
	return n, nil
}
