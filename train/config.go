package train

import (
	"bytes"
	"fmt"
	"os"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/onnxtrain/onnxtrain/backend"
)

// Config is everything `onnxtrain train` takes. The YAML names are the flag
// names; a YAML file (--config) sets defaults that flags override.
type Config struct {
	Model   string `yaml:"model"`
	Data    string `yaml:"data"`
	ValData string `yaml:"val-data"`
	Labels  string `yaml:"labels"`
	// InputName names the graph input IDX and image-folder data feed
	// (default: the model's only data input).
	InputName string `yaml:"input-name"`
	// TokenDType is the token width of .bin token data (uint16 or uint32);
	// SeqLen the window length when the graph's token input leaves it open.
	TokenDType string `yaml:"token-dtype"`
	SeqLen     int    `yaml:"seq-len"`

	Loss           string  `yaml:"loss"`
	LabelSmoothing float64 `yaml:"label-smoothing"`
	IgnoreIndex    int64   `yaml:"ignore-index"`

	Optimizer   string  `yaml:"optimizer"`
	LR          float64 `yaml:"lr"`
	Momentum    float64 `yaml:"momentum"`
	Dampening   float64 `yaml:"dampening"`
	Nesterov    bool    `yaml:"nesterov"`
	WeightDecay float64 `yaml:"weight-decay"`
	Beta1       float64 `yaml:"beta1"`
	Beta2       float64 `yaml:"beta2"`
	Eps         float64 `yaml:"eps"`
	// NoDecayBiasNorm puts biases and normalisation weights in a parameter
	// group without weight decay.
	NoDecayBiasNorm bool   `yaml:"no-decay-bias-norm"`
	TrainOnly       string `yaml:"train-only"`

	BatchSize     int     `yaml:"batch-size"`
	Epochs        int     `yaml:"epochs"`
	Steps         int     `yaml:"steps"`
	GradAccum     int     `yaml:"grad-accum"`
	ClipGradNorm  float64 `yaml:"clip-grad-norm"`
	ClipGradValue float64 `yaml:"clip-grad-value"`
	// SeparateUpdate runs the clip and the optimizer's update as Runs of
	// their own after the step's forward and backward, over gradient sums
	// kept as state, even where the recipe lets them run inside the step
	// (fusedStepFits, run.go).
	SeparateUpdate bool `yaml:"separate-update"`

	LRSchedule  string  `yaml:"lr-schedule"`
	WarmupSteps int     `yaml:"warmup-steps"`
	StepSize    int     `yaml:"step-size"`
	Gamma       float64 `yaml:"gamma"`

	Seed     int64 `yaml:"seed"`
	Shuffle  bool  `yaml:"shuffle"`
	DropLast bool  `yaml:"drop-last"`

	// Image and IDX preprocessing.
	ImageSize  int       `yaml:"image-size"`
	Grayscale  bool      `yaml:"grayscale"`
	Mean       []float64 `yaml:"mean"`
	Std        []float64 `yaml:"std"`
	RandomCrop int       `yaml:"random-crop"` // padding for random crops; 0 = none
	RandomFlip bool      `yaml:"random-flip"`

	Output    string `yaml:"output"`
	LogFormat string `yaml:"log-format"`
	// LogDir receives TensorBoard event files; MetricsAddr serves
	// Prometheus metrics at /metrics (e.g. ":9090").
	LogDir string `yaml:"log-dir"`
	// CheckpointEvery saves a checkpoint under Output every that many
	// optimizer steps; KeepLast keeps only the newest K; Resume restarts
	// from a checkpoint folder, or "latest" under Output.
	CheckpointEvery int    `yaml:"checkpoint-every"`
	KeepLast        int    `yaml:"keep-last"`
	Resume          string `yaml:"resume"`
	// Training control (control.go): EvalEvery evaluates --val-data every
	// that many optimizer steps (0: after every epoch); SaveBest keeps the
	// checkpoint with the best value of a metric (val_loss, val_accuracy)
	// besides the last KeepLast; EarlyStoppingPatience stops after that
	// many evaluations without improvement; LogEvery prints a text line
	// every that many steps (0: about twenty lines per run).
	// OverwriteOutput lets a new run replace another run in Output.
	EvalEvery             int    `yaml:"eval-every"`
	SaveBest              string `yaml:"save-best"`
	EarlyStoppingPatience int    `yaml:"early-stopping-patience"`
	LogEvery              int    `yaml:"log-every"`
	OverwriteOutput       bool   `yaml:"overwrite-output"`
	MetricsAddr           string `yaml:"metrics-addr"`
	Backend               string `yaml:"backend"`

	// Data parallel (a launcher's environment makes the process group).
	// Debug compares the tensor lengths of every collective across ranks
	// before running it; DistTimeout bounds the rendezvous and each
	// collective (zero: ONNXTRAIN_DIST_TIMEOUT, else distrib's default);
	// CompressBF16 sends gradients as bfloat16 on the wire.
	Debug        bool          `yaml:"debug"`
	DistTimeout  time.Duration `yaml:"dist-timeout"`
	CompressBF16 bool          `yaml:"compress-bf16"`
	// Zero is the ZeRO stage: 1 shards the optimizer state across the
	// processes, 2 also the gradients (AcceleratorConfig.Zero).
	Zero int `yaml:"zero"`
	// BucketMB bounds one gradient collective (0: 25, as PyTorch DDP's
	// bucket_cap_mb); NoOverlap reduces gradients after the backward pass
	// instead of while it runs.
	BucketMB  float64 `yaml:"bucket-mb"`
	NoOverlap bool    `yaml:"no-overlap"`
	// Comm is the transport of the collectives: "tcp" (the default; the
	// group forms from the launcher's environment) or "mpi" (MPI_COMM_WORLD
	// under mpirun; needs a binary built with the build tag mpi).
	Comm string `yaml:"comm"`
	// DistSecretFile names a file holding the job's secret (instead of
	// $ONNXTRAIN_DIST_SECRET): every connection between the processes
	// proves it holds it.
	DistSecretFile string `yaml:"dist-secret-file"`
	// Fine-tuning and export (finetune.go, export.go): SaveTrainingGraph
	// also writes the training graph; NumClasses replaces the classifier
	// head; Freeze freezes the parameters it matches; LRGroups are
	// REGEX=LR pairs; FreezeBN keeps BatchNorm in inference mode; Workers
	// decode images in parallel.
	SaveTrainingGraph bool     `yaml:"save-training-graph"`
	NumClasses        int      `yaml:"num-classes"`
	Freeze            string   `yaml:"freeze"`
	LRGroups          []string `yaml:"lr-group"`
	FreezeBN          bool     `yaml:"freeze-bn"`
	Workers           int      `yaml:"workers"`
	// Image folders, torchvision style: RandomResizedCrop draws a crop of
	// 8-100% of the area with aspect ratio 3/4-4/3, resized to ImageSize
	// (training data); ResizeSize resizes the shorter side before a centre
	// crop of ImageSize (validation data, and training data without
	// RandomResizedCrop).
	RandomResizedCrop bool `yaml:"random-resized-crop"`
	ResizeSize        int  `yaml:"resize"`
	// SyncBatchNorm normalises BatchNorm layers with the statistics of the
	// global batch across processes (torch.nn.SyncBatchNorm).
	SyncBatchNorm bool `yaml:"sync-batchnorm"`
	// MixedPrecision is no, bf16 or fp16 (see amp.go).
	MixedPrecision string `yaml:"mixed-precision"`
	// Recompute recomputes cheap activations in the backward pass instead
	// of keeping them from the forward pass (ProgramConfig.Recompute).
	Recompute bool `yaml:"recompute"`

	// Pipeline parallel (pipeline_run.go): PipelineStages ranks (0: off),
	// MicroBatches per optimizer step (0: --grad-accum), the Schedule
	// (gpipe, 1f1b, interleaved, zb1p, zbv) with VirtualStages chunks per
	// rank for interleaved, manual cuts (SplitAt, comma-separated node or
	// initializer names) and the Devices of the ranks (cpu:0,cpu:1,...; cpu:0=3
	// gives a device 3 workers instead of its share of the cores).
	PipelineStages int    `yaml:"pipeline-stages"`
	MicroBatches   int    `yaml:"micro-batches"`
	Schedule       string `yaml:"schedule"`
	VirtualStages  int    `yaml:"virtual-stages"`
	SplitAt        string `yaml:"split-at"`
	Devices        string `yaml:"devices"`
	// Partition is how the cut is balanced: estimate (FLOPs and bytes of
	// each node) or profile (measured on the first micro-batches).
	Partition string `yaml:"partition"`
	// StageMemory bounds each stage's estimated memory ("4GiB", "512MB").
	StageMemory string `yaml:"stage-memory"`
	// PrimitivesOnly compiles the steps with the backend restricted to the
	// primitive and extended sets (backend.CompileOptions.PrimitivesOnly):
	// slower, for checking that the primitive set trains a model.
	PrimitivesOnly bool `yaml:"primitives-only"`
	// Tuning is passed to every compile (backend.Tuning: the Winograd
	// policy, the memory plan); commands fill it from the environment.
	Tuning backend.Tuning `yaml:"-"`
	// NoPushDownGather leaves the pushdown-gather pass out of the training
	// step (ProgramConfig.NoPushDownGather): tests that compare the step
	// with a pipeline's stages, which do not run it, compare the same
	// arithmetic.
	NoPushDownGather bool `yaml:"-"`

	// ForceUnlock takes over --output's lock file whoever holds it (a job
	// on another host that is known to be gone; see outputdir.go).
	ForceUnlock bool `yaml:"force-unlock"`
}

// DefaultConfig holds the defaults of every flag.
func DefaultConfig() Config {
	return Config{
		Labels: "labels", Loss: "cross_entropy", IgnoreIndex: -100,
		Optimizer: "adamw", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8,
		BatchSize: 32, Epochs: 1, GradAccum: 1,
		LRSchedule: "constant", Gamma: 0.1,
		Shuffle: true, LogFormat: "text", Backend: "cpu", Comm: "tcp",
		MixedPrecision: "no",
	}
}

// LoadYAML reads a config file over cfg (keys it lacks keep cfg's values).
func LoadYAML(path string, cfg *Config) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return decodeYAML(path, b, cfg)
}

// decodeYAML is LoadYAML of a file's contents b; path names it in errors.
func decodeYAML(path string, b []byte, cfg *Config) error {
	b, err := dashKeys(b) // validate.go: batch_size: is batch-size:
	if err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(cfg); err != nil {
		return fmt.Errorf("config %s: %w", path, err)
	}
	return nil
}

// Validate checks the values that cannot work, naming the flag.
func (c *Config) Validate() error {
	if err := c.validateRanges(); err != nil { // validate.go
		return err
	}
	switch {
	case c.Model == "":
		return fmt.Errorf("--model is required")
	case c.Data == "":
		return fmt.Errorf("--data is required")
	case c.BatchSize <= 0:
		return fmt.Errorf("--batch-size must be positive, got %d", c.BatchSize)
	case c.GradAccum <= 0:
		return fmt.Errorf("--grad-accum must be positive, got %d", c.GradAccum)
	case c.Epochs <= 0 && c.Steps <= 0:
		return fmt.Errorf("--epochs or --steps must be positive")
	case c.LR < 0:
		return fmt.Errorf("--lr must not be negative, got %g", c.LR)
	case c.ClipGradNorm < 0 || c.ClipGradValue < 0:
		return fmt.Errorf("--clip-grad-norm and --clip-grad-value must not be negative")
	case c.LabelSmoothing < 0 || c.LabelSmoothing >= 1:
		return fmt.Errorf("--label-smoothing must be in [0, 1), got %g", c.LabelSmoothing)
	case (c.CheckpointEvery > 0 || c.Resume == "latest") && c.Output == "":
		return fmt.Errorf("--checkpoint-every and --resume latest need --output (checkpoints live under it)")
	case c.CheckpointEvery < 0 || c.KeepLast < 0:
		return fmt.Errorf("--checkpoint-every and --keep-last must not be negative")
	case c.BucketMB < 0:
		return fmt.Errorf("--bucket-mb must not be negative, got %g", c.BucketMB)
	case c.Zero < 0 || c.Zero > 2:
		return fmt.Errorf("--zero must be 0, 1 or 2, got %d", c.Zero)
	case c.DistTimeout < 0:
		return fmt.Errorf("--dist-timeout must not be negative, got %v", c.DistTimeout)
	case c.Comm != "tcp" && c.Comm != "mpi":
		return fmt.Errorf("--comm must be tcp or mpi, got %q", c.Comm)
	case c.LogFormat != "text" && c.LogFormat != "json":
		return fmt.Errorf("--log-format must be text or json, got %q", c.LogFormat)
	}
	if _, err := ParseMixedPrecision(c.MixedPrecision); err != nil { // amp.go
		return err
	}
	if c.CompressBF16 && c.Comm == "mpi" {
		// MPI's collectives move float32; silently sending full width
		// would misreport what the run does.
		return fmt.Errorf("--compress-bf16 works only with --comm tcp: the MPI transport sends gradients as float32")
	}
	return nil
}
