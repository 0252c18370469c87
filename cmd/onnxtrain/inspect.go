package main

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/spf13/cobra"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
	"github.com/onnxtrain/onnxtrain/importer"
)

// Report is what `onnxtrain inspect` prints (as text or JSON).
type Report struct {
	Path           string            `json:"path"`
	IRVersion      int64             `json:"ir_version"`
	Opsets         map[string]int64  `json:"opsets"`
	Producer       string            `json:"producer"`
	Inputs         []ValueReport     `json:"inputs"`
	Outputs        []ValueReport     `json:"outputs"`
	Parameters     int64             `json:"parameters"`
	ParameterBytes int64             `json:"parameter_bytes"`
	Initializers   int               `json:"initializers"`
	Nodes          int               `json:"nodes"`
	OpHistogram    map[string]int    `json:"op_histogram"`
	Unsupported    []UnsupportedNode `json:"unsupported"`
	// NoGradient lists nodes whose op training cannot differentiate yet
	// (no gradient rule and no lowering to ops that have one).
	NoGradient      []UnsupportedNode `json:"no_gradient"`
	Backend         string            `json:"backend"`
	MetadataProps   map[string]string `json:"metadata,omitempty"`
	SparseInitNames []string          `json:"sparse_initializers,omitempty"`
}

// ValueReport describes one graph input or output.
type ValueReport struct {
	Name string `json:"name"`
	Type string `json:"type"`
}

// UnsupportedNode names a node whose op the backend cannot run.
type UnsupportedNode struct {
	Op     string `json:"op"`
	Domain string `json:"domain,omitempty"`
	Node   string `json:"node"`
}

func newInspectCmd() *cobra.Command {
	var asJSON bool
	var backendName string
	var pf pipelineInspectFlags
	cmd := &cobra.Command{
		Use:   "inspect MODEL.onnx",
		Short: "Describe a model: opsets, inputs and outputs, parameters, ops, and what cannot run yet",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			m, err := importer.Load(args[0])
			if err != nil {
				return err
			}
			if pf.wanted() { // inspect_pipeline.go
				return inspectPipeline(cmd.OutOrStdout(), m, pf, asJSON)
			}
			b, err := backend.Open(backendName)
			if err != nil {
				return err
			}
			r := Inspect(args[0], m, b)
			if asJSON {
				enc := json.NewEncoder(cmd.OutOrStdout())
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			r.WriteText(cmd.OutOrStdout())
			return nil
		},
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&backendName, "backend", "cpu", "backend whose op support is reported")
	addPipelineInspectFlags(cmd, &pf)
	return cmd
}

// Inspect builds the report for a model.
func Inspect(path string, m *graph.Model, b backend.Backend) *Report {
	g := m.Graph
	r := &Report{
		Path: path, IRVersion: m.IRVersion, Opsets: m.Opsets,
		Producer:    strings.TrimSpace(m.ProducerName + " " + m.ProducerVersion),
		OpHistogram: map[string]int{}, Backend: b.Name(), MetadataProps: m.Metadata,
		SparseInitNames: g.SparseInitializers,
	}
	isInit := map[string]bool{}
	for name, t := range g.Initializers {
		isInit[name] = true
		r.Parameters += int64(t.Size())
		r.ParameterBytes += int64(t.Size() * t.DType.Size())
	}
	r.Initializers = len(g.Initializers)
	for _, in := range g.Inputs {
		if !isInit[in.Name] {
			r.Inputs = append(r.Inputs, ValueReport{Name: in.Name, Type: in.Type.String()})
		}
	}
	for _, o := range g.Outputs {
		r.Outputs = append(r.Outputs, ValueReport{Name: o.Name, Type: o.Type.String()})
	}
	var visit func(g *graph.Graph)
	visit = func(g *graph.Graph) {
		for _, n := range g.Nodes {
			r.Nodes++
			key := n.OpType
			if n.Domain != "" {
				key = n.Domain + "." + n.OpType
			}
			r.OpHistogram[key]++
			opset := m.Opsets[n.Domain]
			if _, local := m.Functions[n.Domain+":"+n.OpType]; !local && !b.Supports(n.Domain, n.OpType, opset) {
				r.Unsupported = append(r.Unsupported, UnsupportedNode{Op: n.OpType, Domain: n.Domain, Node: n.Label()})
			}
			if !graph.HasGrad(n.Domain, n.OpType) && !(n.Domain == "" && graph.HasLowering(n.OpType)) && n.OpType != "Constant" {
				r.NoGradient = append(r.NoGradient, UnsupportedNode{Op: n.OpType, Domain: n.Domain, Node: n.Label()})
			}
			for _, sg := range n.Subgraphs() {
				visit(sg)
			}
		}
	}
	visit(g)
	return r
}

// WriteText prints the report for people.
func (r *Report) WriteText(w io.Writer) {
	fmt.Fprintf(w, "model:      %s\n", r.Path)
	fmt.Fprintf(w, "ir_version: %d\n", r.IRVersion)
	var ops []string
	for d, v := range r.Opsets {
		if d == "" {
			d = "ai.onnx"
		}
		ops = append(ops, fmt.Sprintf("%s %d", d, v))
	}
	sort.Strings(ops)
	fmt.Fprintf(w, "opsets:     %s\n", strings.Join(ops, ", "))
	fmt.Fprintf(w, "producer:   %s\n", r.Producer)
	fmt.Fprintf(w, "inputs:\n")
	for _, v := range r.Inputs {
		fmt.Fprintf(w, "  %-24s %s\n", v.Name, v.Type)
	}
	fmt.Fprintf(w, "outputs:\n")
	for _, v := range r.Outputs {
		fmt.Fprintf(w, "  %-24s %s\n", v.Name, v.Type)
	}
	fmt.Fprintf(w, "parameters: %d in %d initializers (%s)\n", r.Parameters, r.Initializers, humanBytes(r.ParameterBytes))
	fmt.Fprintf(w, "nodes:      %d\n", r.Nodes)
	fmt.Fprintf(w, "ops:\n")
	type kv struct {
		k string
		v int
	}
	var hist []kv
	for k, v := range r.OpHistogram {
		hist = append(hist, kv{k, v})
	}
	sort.Slice(hist, func(i, j int) bool {
		if hist[i].v != hist[j].v {
			return hist[i].v > hist[j].v
		}
		return hist[i].k < hist[j].k
	})
	for _, h := range hist {
		fmt.Fprintf(w, "  %-28s %d\n", h.k, h.v)
	}
	if len(r.Unsupported) == 0 {
		fmt.Fprintf(w, "unsupported: none (every op runs on the %s backend)\n", r.Backend)
	} else {
		fmt.Fprintf(w, "unsupported on the %s backend: %d node(s)\n", r.Backend, len(r.Unsupported))
		writeNodesByOp(w, r.Unsupported)
	}
	if len(r.NoGradient) == 0 {
		fmt.Fprintf(w, "training: every op can be differentiated\n")
	} else {
		fmt.Fprintf(w, "training: %d node(s) cannot be differentiated yet (train fails if they lie between a parameter and the loss; --train-only can freeze what precedes them)\n", len(r.NoGradient))
		writeNodesByOp(w, r.NoGradient)
	}
}

// writeNodesByOp lists nodes grouped by op, with at most three names each.
func writeNodesByOp(w io.Writer, nodes []UnsupportedNode) {
	byOp := map[string][]string{}
	var order []string
	for _, u := range nodes {
		op := u.Op
		if u.Domain != "" {
			op = u.Domain + "." + op
		}
		if _, ok := byOp[op]; !ok {
			order = append(order, op)
		}
		byOp[op] = append(byOp[op], fmt.Sprintf("%q", u.Node))
	}
	for _, op := range order {
		nodes := byOp[op]
		more := ""
		if len(nodes) > 3 {
			more = fmt.Sprintf(" and %d more", len(nodes)-3)
			nodes = nodes[:3]
		}
		fmt.Fprintf(w, "  %-28s used by %s%s\n", op, strings.Join(nodes, ", "), more)
	}
}

func humanBytes(n int64) string {
	const unit = 1024
	if n < unit {
		return fmt.Sprintf("%d B", n)
	}
	div, exp := int64(unit), 0
	for m := n / unit; m >= unit; m /= unit {
		div *= unit
		exp++
	}
	return fmt.Sprintf("%.1f %ciB", float64(n)/float64(div), "KMGTPE"[exp])
}
