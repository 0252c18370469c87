package main

import (
	"errors"
	"reflect"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/onnxtrain/onnxtrain/train"
)

func newTrainCmd() *cobra.Command {
	cfg := train.DefaultConfig()
	var configPath string
	cmd := &cobra.Command{
		Use:   "train --model MODEL.onnx --data DATA [flags]",
		Short: "Fine-tune an exported model: forward, loss, backward, optimizer, over the data",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			final := cfg
			if configPath != "" {
				// The file gives defaults; flags set on the command line win.
				base := train.DefaultConfig()
				if err := train.LoadYAML(configPath, &base); err != nil {
					return err
				}
				final = base
				cmd.Flags().Visit(func(f *pflag.Flag) { applyFlag(&final, &cfg, f.Name) })
			}
			final.Tuning = tuningOrDefault()
			final.NoPushDownGather = noPushDownGather()
			ctx, stopper, release := trapStopSignals(cmd.Context()) // signal.go
			defer release()
			_, err := train.Run(ctx, final, cmd.OutOrStdout(), cmd.ErrOrStderr())
			if sig := stopper.Received(); sig != nil && errors.Is(err, train.ErrStopped) {
				err = &exitError{code: signalExitCode(sig), msg: err.Error()}
			}
			// Reported now, while a stop signal still comes to the
			// stopper: a launcher that stops this worker because another
			// one failed (both refusing --output, say) signals it as it
			// returns, and once release restores the default handling
			// that signal would end the process before main printed why.
			return reportNow(cmd, err)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configPath, "config", "", "YAML file with any of these flags (flags given on the command line override it)")
	f.StringVar(&cfg.Model, "model", "", "ONNX model to train (exported in training mode)")
	f.StringVar(&cfg.Data, "data", "", "training data: .npz/.npy, an IDX images file (MNIST family), an image folder (one sub-folder per class), or a .bin file of token ids")
	f.StringVar(&cfg.ValData, "val-data", "", "validation data, same formats; evaluated after every epoch (or every --eval-every steps), checked before the first step")
	f.StringVar(&cfg.Labels, "labels", cfg.Labels, "name of the label array in .npz data")
	f.StringVar(&cfg.InputName, "input-name", "", "graph input fed by IDX or image-folder data (default: the model's only input)")
	f.StringVar(&cfg.TokenDType, "token-dtype", "uint16", ".bin token data: uint16 or uint32 token ids")
	f.IntVar(&cfg.SeqLen, "seq-len", 0, ".bin token data: window length (default: the token input's fixed length in the graph)")
	f.StringVar(&cfg.Loss, "loss", cfg.Loss, "cross_entropy, mse, l1, bce_with_logits, or output:NAME (the graph computes its own loss)")
	f.Float64Var(&cfg.LabelSmoothing, "label-smoothing", 0, "label smoothing for cross_entropy")
	f.Int64Var(&cfg.IgnoreIndex, "ignore-index", cfg.IgnoreIndex, "label value cross_entropy ignores")
	f.StringVar(&cfg.Optimizer, "optimizer", cfg.Optimizer, "sgd, adam or adamw")
	f.Float64Var(&cfg.LR, "lr", cfg.LR, "learning rate")
	f.Float64Var(&cfg.Momentum, "momentum", 0, "SGD momentum")
	f.Float64Var(&cfg.Dampening, "dampening", 0, "SGD dampening")
	f.BoolVar(&cfg.Nesterov, "nesterov", false, "SGD Nesterov momentum")
	f.Float64Var(&cfg.WeightDecay, "weight-decay", 0, "weight decay (L2 for sgd/adam, decoupled for adamw)")
	f.Float64Var(&cfg.Beta1, "beta1", cfg.Beta1, "Adam beta1")
	f.Float64Var(&cfg.Beta2, "beta2", cfg.Beta2, "Adam beta2")
	f.Float64Var(&cfg.Eps, "eps", cfg.Eps, "Adam epsilon")
	f.BoolVar(&cfg.NoDecayBiasNorm, "no-decay-bias-norm", false, "no weight decay on biases and normalisation weights (rank ≤ 1 parameters)")
	f.StringVar(&cfg.TrainOnly, "train-only", "", "train only parameters whose name matches this regexp; freeze the rest")
	f.IntVar(&cfg.BatchSize, "batch-size", cfg.BatchSize, "micro-batch size")
	f.IntVar(&cfg.Epochs, "epochs", cfg.Epochs, "epochs to train")
	f.IntVar(&cfg.Steps, "steps", 0, "stop after this many optimizer steps (overrides --epochs)")
	f.IntVar(&cfg.GradAccum, "grad-accum", cfg.GradAccum, "micro-batches per optimizer step")
	f.Float64Var(&cfg.ClipGradNorm, "clip-grad-norm", 0, "clip the total gradient L2 norm to this (0: off)")
	f.BoolVar(&cfg.SeparateUpdate, "separate-update", false, "run the optimizer's update as its own program over gradient sums kept between steps, even where it could run inside the step (one micro-batch per step, one process, no ZeRO)")
	f.Float64Var(&cfg.ClipGradValue, "clip-grad-value", 0, "clip every gradient element to ±this (0: off)")
	f.StringVar(&cfg.LRSchedule, "lr-schedule", cfg.LRSchedule, "constant, linear, cosine or step")
	f.IntVar(&cfg.WarmupSteps, "warmup-steps", 0, "linear warmup steps")
	f.IntVar(&cfg.StepSize, "step-size", 0, "steps between decays for --lr-schedule step")
	f.Float64Var(&cfg.Gamma, "gamma", cfg.Gamma, "decay factor for --lr-schedule step")
	f.Int64Var(&cfg.Seed, "seed", 0, "seed for shuffling, augmentation and dropout")
	f.BoolVar(&cfg.Shuffle, "shuffle", cfg.Shuffle, "shuffle the training data every epoch")
	f.BoolVar(&cfg.DropLast, "drop-last", false, "drop the last incomplete batch of an epoch")
	f.IntVar(&cfg.ImageSize, "image-size", 0, "resize images to this square size")
	f.BoolVar(&cfg.Grayscale, "grayscale", false, "load images as one channel")
	f.Float64SliceVar(&cfg.Mean, "mean", nil, "per-channel mean to subtract (images and IDX)")
	f.Float64SliceVar(&cfg.Std, "std", nil, "per-channel std to divide by (images and IDX)")
	f.IntVar(&cfg.RandomCrop, "random-crop", 0, "random crops with this much padding (training data only)")
	f.BoolVar(&cfg.RandomFlip, "random-flip", false, "random horizontal flips (training data only)")
	f.StringVar(&cfg.Output, "output", "", "folder for the trained model (model.onnx and model.safetensors)")
	f.StringVar(&cfg.LogFormat, "log-format", cfg.LogFormat, "text (for people) or json (one object per optimizer step on stdout)")
	f.StringVar(&cfg.Backend, "backend", cfg.Backend, "backend to train on")
	f.StringVar(&cfg.LogDir, "log-dir", "", "write TensorBoard event files into this folder")
	f.IntVar(&cfg.CheckpointEvery, "checkpoint-every", 0, "save a checkpoint under --output every N optimizer steps")
	f.IntVar(&cfg.KeepLast, "keep-last", 0, "keep only the newest K checkpoints (0: all)")
	f.StringVar(&cfg.Resume, "resume", "", "resume from a checkpoint folder, or \"latest\" (the newest complete one under --output)")
	f.IntVar(&cfg.EvalEvery, "eval-every", 0, "evaluate --val-data every N optimizer steps (0: after every epoch)")
	f.StringVar(&cfg.SaveBest, "save-best", "", "keep the checkpoint with the best val_loss or val_accuracy (besides the last --keep-last); needs --val-data and --output")
	f.IntVar(&cfg.EarlyStoppingPatience, "early-stopping-patience", 0, "stop after K evaluations without improvement of the --save-best metric (val_loss without it); 0: off")
	f.IntVar(&cfg.LogEvery, "log-every", 0, "text log: a line every N optimizer steps (0: about twenty per run); JSON logs every step")
	f.BoolVar(&cfg.OverwriteOutput, "overwrite-output", false, "start a new run in an --output that holds another one, removing its checkpoints and model files")
	f.BoolVar(&cfg.ForceUnlock, "force-unlock", false, "take over --output's lock file even when a job on another host holds it (when you know that job is gone)")
	f.StringVar(&cfg.MetricsAddr, "metrics-addr", "", "serve Prometheus metrics at http://ADDR/metrics during training (e.g. :9090)")
	f.BoolVar(&cfg.Debug, "debug", false, "data parallel: compare tensor lengths across ranks before every collective (one extra small exchange each)")
	f.DurationVar(&cfg.DistTimeout, "dist-timeout", 0, "data parallel: time a rank waits for the others in the rendezvous and in each collective before failing, naming the rank that did not answer (0: $ONNXTRAIN_DIST_TIMEOUT or 10m)")
	f.StringVar(&cfg.Comm, "comm", cfg.Comm, "data parallel: transport of the collectives, tcp (the group forms from the launcher's environment) or mpi (run under mpirun; needs a binary built with -tags mpi)")
	f.StringVar(&cfg.DistSecretFile, "dist-secret-file", "", "data parallel: file holding the job's secret, the same on every rank (instead of $ONNXTRAIN_DIST_SECRET; e.g. a mounted Kubernetes Secret): connections that cannot prove it are refused")
	f.BoolVar(&cfg.CompressBF16, "compress-bf16", false, "data parallel: send gradients as bfloat16 on the wire (half the bytes; partial sums are rounded to bfloat16, added in float32)")
	f.Float64Var(&cfg.BucketMB, "bucket-mb", 0, "data parallel: MB of gradients per collective (0: 25, as PyTorch DDP)")
	f.BoolVar(&cfg.NoOverlap, "no-overlap", false, "data parallel: reduce gradients after the backward pass instead of while it runs (same result)")
	f.IntVar(&cfg.Zero, "zero", 0, "data parallel: ZeRO stage; 1 shards the optimizer state across processes, 2 also the gradients (0: off)")
	f.StringVar(&cfg.MixedPrecision, "mixed-precision", cfg.MixedPrecision, "no, bf16 or fp16: MatMul/Gemm/Conv in the low type, softmax, norms, losses and reductions in float32, float32 master weights; fp16 adds dynamic loss scaling (skipped steps are reported)")
	f.BoolVar(&cfg.Recompute, "recompute", false, "recompute cheap activations (elementwise ops, activations, normalisations, views) and attention's probabilities in the backward pass instead of keeping them from the forward pass: a lower memory peak for a little more time; losses and gradients are unchanged (attention's probabilities are recomputed without it too where the keys outnumber the head's depth 4 to 1, as at GPT-2's 1024 tokens)")
	f.BoolVar(&cfg.SyncBatchNorm, "sync-batchnorm", false, "data parallel: normalise BatchNorm layers with the statistics of the whole global batch, as torch.nn.SyncBatchNorm (4 small all-reduces per BatchNorm layer per step)")
	addPipelineTrainFlags(f, &cfg) // train_pipeline.go
	addFineTuneFlags(f, &cfg)      // finetune_flags.go
	return cmd
}

// applyFlag copies the field whose YAML name is the flag's name from flags
// into dst (Config's YAML names are the flag names).
func applyFlag(dst, flags *train.Config, name string) {
	dv, fv := reflect.ValueOf(dst).Elem(), reflect.ValueOf(flags).Elem()
	ty := dv.Type()
	for i := 0; i < ty.NumField(); i++ {
		if ty.Field(i).Tag.Get("yaml") == name {
			dv.Field(i).Set(fv.Field(i))
			return
		}
	}
}
