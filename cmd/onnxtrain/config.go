package main

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"
	"gopkg.in/yaml.v3"

	"github.com/onnxtrain/onnxtrain/tensorio"
	"github.com/onnxtrain/onnxtrain/train"
)

// newConfigCmd is `onnxtrain config`: a questionnaire that writes the YAML
// file `onnxtrain train --config` reads, and `config default`, which writes
// every default without asking.
func newConfigCmd() *cobra.Command {
	var output string
	var force bool
	cmd := &cobra.Command{
		Use:   "config [--output train.yaml]",
		Short: "Ask a few questions and write a training config for `onnxtrain train --config`",
		Long: `Asks for the model, the data and the main training settings, one question a line,
each with its default in brackets (Enter accepts it), and writes a YAML file whose keys are
the flag names of "onnxtrain train". Only the model, the data and the answers that differ
from the defaults are written. Answers are read line by line from standard input, so a
pipe can drive it too; at the end of the input the remaining questions take their defaults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkConfigOutput(output, force); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			in := cmd.InOrStdin()
			q := newQuestioner(in, w, !isTerminal(in))
			cfg, err := askConfig(q)
			if err != nil {
				return err
			}
			b, err := configYAML(cfg, false)
			if err != nil {
				return err
			}
			if err := writeConfigFile(output, b); err != nil {
				return err
			}
			fmt.Fprintf(w, "\nwrote %s\nstart training with:\n  onnxtrain train --config %s\n", output, shellQuote(output))
			return nil
		},
	}
	def := &cobra.Command{
		Use:   "default [--output train.yaml]",
		Short: "Write every setting of `onnxtrain train` with its default, without questions",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := checkConfigOutput(output, force); err != nil {
				return err
			}
			b, err := configYAML(train.DefaultConfig(), true)
			if err != nil {
				return err
			}
			if err := writeConfigFile(output, b); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "wrote %s with the defaults; set model and data in it, then run:\n  onnxtrain train --config %s\n", output, shellQuote(output))
			return nil
		},
	}
	cmd.PersistentFlags().StringVarP(&output, "output", "o", "train.yaml", "YAML file to write")
	cmd.PersistentFlags().BoolVar(&force, "force", false, "overwrite the output file if it exists")
	cmd.AddCommand(def)
	return cmd
}

// checkConfigOutput fails before any question is asked when the file cannot
// be written: it exists (without --force), or its folder does not.
func checkConfigOutput(path string, force bool) error {
	if path == "" {
		return errors.New("config: --output must name a file")
	}
	if st, err := os.Stat(path); err == nil {
		if st.IsDir() {
			return fmt.Errorf("config: --output %s is a folder; name a file", path)
		}
		if !force {
			return fmt.Errorf("config: %s exists; use --force to overwrite it or --output to choose another file", path)
		}
	}
	dir := filepath.Dir(path)
	if st, err := os.Stat(dir); err != nil || !st.IsDir() {
		return fmt.Errorf("config: folder %s of --output %s does not exist", dir, path)
	}
	return nil
}

// writeConfigFile writes the file atomically (temporary file, sync, rename)
// and makes it readable like any other config file.
func writeConfigFile(path string, b []byte) error {
	if err := tensorio.WriteFileAtomic(path, b); err != nil {
		return fmt.Errorf("config: writing %s: %w", path, err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	return nil
}

func isTerminal(r io.Reader) bool {
	f, ok := r.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// shellQuote quotes a path for the command line printed at the end when it
// holds anything a shell would split or expand.
func shellQuote(s string) string {
	for _, r := range s {
		if !(r == '/' || r == '.' || r == '_' || r == '-' || r == '+' || r == ':' ||
			('a' <= r && r <= 'z') || ('A' <= r && r <= 'Z') || ('0' <= r && r <= '9')) {
			return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
		}
	}
	return s
}

// questioner asks one question a line and reads the answers line by line.
type questioner struct {
	in   *bufio.Reader
	out  io.Writer
	echo bool // input is not a terminal: print the answer so the transcript reads well
	eof  bool
}

func newQuestioner(in io.Reader, out io.Writer, echo bool) *questioner {
	return &questioner{in: bufio.NewReader(in), out: out, echo: echo}
}

// check validates an answer; it returns the value to keep, an optional
// warning (the answer is kept), or an error (the question is asked again).
type check func(answer string) (value, warning string, err error)

// ask prints the question with its default in brackets and returns the
// checked answer. An empty line takes the default; an empty default means
// the question needs an answer. At the end of the input every question takes
// its default, and one without a default is an error.
func (q *questioner) ask(question, def string, chk check) (string, error) {
	for {
		if def != "" {
			fmt.Fprintf(q.out, "%s [%s]: ", question, def)
		} else {
			fmt.Fprintf(q.out, "%s: ", question)
		}
		line, err := q.readLine()
		if err != nil {
			return "", err
		}
		if q.echo {
			fmt.Fprintln(q.out, line)
		}
		if line == "" {
			if q.eof && def == "" {
				return "", fmt.Errorf("config: %q needs an answer and the input ended", question)
			}
			if def == "" {
				fmt.Fprintln(q.out, "  an answer is needed here")
				continue
			}
			line = def
		}
		v, warning, err := chk(line)
		if err != nil {
			if q.eof {
				return "", fmt.Errorf("config: %q: %w", question, err)
			}
			fmt.Fprintf(q.out, "  %v; try again\n", err)
			continue
		}
		if warning != "" {
			fmt.Fprintf(q.out, "  warning: %s\n", warning)
		}
		return v, nil
	}
}

func (q *questioner) readLine() (string, error) {
	if q.eof {
		return "", nil
	}
	line, err := q.in.ReadString('\n')
	if errors.Is(err, io.EOF) {
		q.eof = true
	} else if err != nil {
		return "", fmt.Errorf("config: reading the answers: %w", err)
	}
	return strings.TrimSpace(line), nil
}

// noneWord is the answer that leaves an optional path empty.
const noneWord = "none"

func isNone(s string) bool { return strings.EqualFold(s, noneWord) || s == "-" }

// pathCheck keeps any path and warns when it does not exist (the file may
// be made later); optional paths accept "none". wantExt, when set, warns on
// another extension.
func pathCheck(optional bool, wantExt string) check {
	return func(a string) (string, string, error) {
		if optional && isNone(a) {
			return "", "", nil
		}
		if isNone(a) {
			return "", "", errors.New("this one cannot be none")
		}
		if _, err := os.Stat(a); err != nil {
			return a, fmt.Sprintf("%s does not exist (yet); keeping it", a), nil
		}
		if wantExt != "" && !strings.EqualFold(filepath.Ext(a), wantExt) {
			return a, fmt.Sprintf("%s does not end in %s", a, wantExt), nil
		}
		return a, "", nil
	}
}

func choiceCheck(choices ...string) check {
	return func(a string) (string, string, error) {
		for _, c := range choices {
			if strings.EqualFold(a, c) {
				return c, "", nil
			}
		}
		return "", "", fmt.Errorf("%q is not one of %s", a, strings.Join(choices, ", "))
	}
}

func lossCheck(a string) (string, string, error) {
	if name, ok := strings.CutPrefix(a, "output:"); ok {
		if name == "" {
			return "", "", errors.New("output:NAME needs the name of the graph output holding the loss")
		}
		return a, "", nil
	}
	return choiceCheck("cross_entropy", "mse", "l1", "bce_with_logits")(a)
}

func floatCheck(min float64, minIncluded bool) check {
	return func(a string) (string, string, error) {
		v, err := strconv.ParseFloat(a, 64)
		if err != nil {
			return "", "", fmt.Errorf("%q is not a number", a)
		}
		if v < min || (!minIncluded && v == min) {
			rel := "at least"
			if !minIncluded {
				rel = "more than"
			}
			return "", "", fmt.Errorf("%g must be %s %g", v, rel, min)
		}
		return strconv.FormatFloat(v, 'g', -1, 64), "", nil
	}
}

func intCheck(min int) check {
	return func(a string) (string, string, error) {
		v, err := strconv.Atoi(a)
		if err != nil {
			return "", "", fmt.Errorf("%q is not a whole number", a)
		}
		if v < min {
			return "", "", fmt.Errorf("%d must be at least %d", v, min)
		}
		return strconv.Itoa(v), "", nil
	}
}

func mixedPrecisionCheck(a string) (string, string, error) {
	return choiceCheck("no", "fp16", "bf16")(a)
}

func fmtFloat(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }

// askConfig runs the questionnaire and returns the Config it describes.
func askConfig(q *questioner) (train.Config, error) {
	cfg := train.DefaultConfig()
	fmt.Fprintln(q.out, "onnxtrain config: answer each question; Enter takes the default in brackets.")
	var err error
	str := func(dst *string, question, def string, chk check) {
		if err == nil {
			*dst, err = q.ask(question, def, chk)
		}
	}
	num := func(question string, def string, chk check, set func(string)) {
		if err == nil {
			var s string
			if s, err = q.ask(question, def, chk); err == nil {
				set(s)
			}
		}
	}
	parseF := func(dst *float64) func(string) {
		return func(s string) { *dst, _ = strconv.ParseFloat(s, 64) }
	}
	parseI := func(dst *int) func(string) {
		return func(s string) { *dst, _ = strconv.Atoi(s) }
	}

	str(&cfg.Model, "Model to train (ONNX exported in training mode)", "", pathCheck(false, ".onnx"))
	str(&cfg.Data, "Training data (.npz/.npy, IDX file or folder, or image folder)", "", pathCheck(false, ""))
	str(&cfg.ValData, "Validation data (same formats)", noneWord, pathCheck(true, ""))
	str(&cfg.Loss, "Loss (cross_entropy, mse, l1, bce_with_logits, output:NAME)", cfg.Loss, lossCheck)
	str(&cfg.Optimizer, "Optimizer (sgd, adam, adamw)", cfg.Optimizer, choiceCheck("sgd", "adam", "adamw"))
	num("Learning rate", fmtFloat(cfg.LR), floatCheck(0, true), parseF(&cfg.LR))
	if err == nil && cfg.Optimizer == "sgd" {
		num("SGD momentum", fmtFloat(cfg.Momentum), floatCheck(0, true), parseF(&cfg.Momentum))
	}
	num("Weight decay", fmtFloat(cfg.WeightDecay), floatCheck(0, true), parseF(&cfg.WeightDecay))
	num("Batch size (per micro-batch)", strconv.Itoa(cfg.BatchSize), intCheck(1), parseI(&cfg.BatchSize))
	num("Epochs", strconv.Itoa(cfg.Epochs), intCheck(1), parseI(&cfg.Epochs))
	num("Gradient accumulation (micro-batches per optimizer step)", strconv.Itoa(cfg.GradAccum), intCheck(1), parseI(&cfg.GradAccum))
	num("Clip gradient norm (0: off)", fmtFloat(cfg.ClipGradNorm), floatCheck(0, true), parseF(&cfg.ClipGradNorm))
	str(&cfg.LRSchedule, "Learning-rate schedule (constant, linear, cosine, step)", cfg.LRSchedule, choiceCheck("constant", "linear", "cosine", "step"))
	if err == nil && cfg.LRSchedule == "step" {
		num("Steps between decays", "", intCheck(1), parseI(&cfg.StepSize))
		num("Decay factor", fmtFloat(cfg.Gamma), floatCheck(0, false), parseF(&cfg.Gamma))
	}
	num("Warmup steps (0: none)", strconv.Itoa(cfg.WarmupSteps), intCheck(0), parseI(&cfg.WarmupSteps))
	str(&cfg.MixedPrecision, "Mixed precision (no, fp16, bf16)", cfg.MixedPrecision, mixedPrecisionCheck)
	outDef := noneWord
	if cfg.Model != "" {
		outDef = filepath.Join("runs", strings.TrimSuffix(filepath.Base(cfg.Model), filepath.Ext(cfg.Model)))
	}
	str(&cfg.Output, "Output folder for the trained model (none: do not save)", outDef, func(a string) (string, string, error) {
		if isNone(a) {
			return "", "", nil
		}
		if st, err := os.Stat(a); err == nil && !st.IsDir() {
			return "", "", fmt.Errorf("%s is a file, not a folder", a)
		}
		return a, "", nil
	})
	str(&cfg.LogFormat, "Log format (text, json)", cfg.LogFormat, choiceCheck("text", "json"))
	if err != nil {
		return train.Config{}, err
	}
	if err := cfg.Validate(); err != nil {
		return train.Config{}, fmt.Errorf("config: %w", err)
	}
	return cfg, nil
}

// configYAML renders cfg as YAML keyed by the train flag names, in the order
// of Config's fields, each key preceded by its flag's help text. With all
// false only model, data and the fields that differ from the defaults are
// written; with all true every field is.
func configYAML(cfg train.Config, all bool) ([]byte, error) {
	usage := map[string]string{}
	newTrainCmd().Flags().VisitAll(func(f *pflag.Flag) { usage[f.Name] = f.Usage })

	def := train.DefaultConfig()
	cv, dv := reflect.ValueOf(cfg), reflect.ValueOf(def)
	ty := cv.Type()
	m := &yaml.Node{Kind: yaml.MappingNode}
	for i := 0; i < ty.NumField(); i++ {
		name := ty.Field(i).Tag.Get("yaml")
		if name == "" || name == "-" {
			continue
		}
		fv := cv.Field(i)
		if !all && name != "model" && name != "data" && reflect.DeepEqual(fv.Interface(), dv.Field(i).Interface()) {
			continue
		}
		key := &yaml.Node{Kind: yaml.ScalarNode, Value: name, HeadComment: usage[name]}
		val := &yaml.Node{}
		if fv.Kind() == reflect.Slice && fv.IsNil() {
			// null loads back as a nil slice; [] would load as an empty one.
			val = &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!null", Value: "null"}
		} else if err := val.Encode(fv.Interface()); err != nil {
			return nil, fmt.Errorf("config: encoding %s: %w", name, err)
		}
		if val.Kind == yaml.SequenceNode {
			val.Style = yaml.FlowStyle
		}
		m.Content = append(m.Content, key, val)
	}
	doc := &yaml.Node{
		Kind:        yaml.DocumentNode,
		HeadComment: "onnxtrain train configuration (written by `onnxtrain config`).\nKeys are the flags of `onnxtrain train`; flags given on its command line override them.",
		Content:     []*yaml.Node{m},
	}
	var sb strings.Builder
	enc := yaml.NewEncoder(&sb)
	enc.SetIndent(2)
	if err := enc.Encode(doc); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if err := enc.Close(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return []byte(sb.String()), nil
}
