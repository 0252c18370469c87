package graph

// The collective ops of onnxtrain's domain (InternalDomain): data-parallel
// gradient reduction as nodes of the training program. Their kernels call
// the communicator the Run's context carries (backend.Communicator); the
// transport is the caller's business (distrib's ring over TCP, MPI, or a
// GPU library). Like the optimizer-step ops they are multi-tensor and
// functional in the graph: each output is the new value of the input
// UpdatedInput names, so that a backend can reduce state buffers in place.
//
// With n the attribute "tensors":
//
//	AllReduce       inputs  sync (bool scalar), X_1..X_n (float32)
//	                outputs X'_1..X'_n
//	                attrs   tensors, reduction ("sum" or "mean"), compress ("" or "bf16"), bucket (int)
//	                When sync is true, X' is the element-wise reduction over every process of
//	                the concatenation X_1‖…‖X_n (one message; "mean" divides the sum by the
//	                number of processes in float32; "bf16" rounds each value to bfloat16 on
//	                the wire). When sync is false, or with one process, X' = X.
//	AllReduceStart  the inputs and attributes of AllReduce; outputs X^_1..X^_n: the same
//	                reduction, started and left in flight. The outputs may be read by the
//	                AllReduceWait of the same bucket only (which gives their values);
//	                a node between the two runs while the reduction travels.
//	AllReduceWait   inputs  sync (bool scalar), X^_1..X^_n (the outputs of one AllReduceStart)
//	                outputs X'_1..X'_n, the reduced values
//	                attrs   tensors, bucket (the Start's)
//
// Every process must run the same collective nodes with the same sync flag
// in the same order: a program identical on every process gives that. The
// communicator carries a program's collectives, including synchronised
// BatchNorm's AllReduceSum, one at a time in the order the nodes start
// them, so an in-flight bucket never reorders another process's messages.
//
// ZeRO (train/zero.go) lays the tensors X_1..X_n end to end in one flat
// space of Ψ elements, cut into "world" partitions of P = ⌈Ψ/world⌉; the
// process of index "rank" owns partition rank, elements [rank·P, min((rank+1)·P, Ψ)).
// The exchange goes in rounds of "chunk" elements per partition: round k
// takes elements [q·P + k·chunk, q·P + (k+1)·chunk) of every partition q
// (zeros past Ψ) as block q of one message.
//
//	ReduceScatter   inputs  sync (bool scalar), fresh (bool scalar), S (float32 [P]), G_1..G_n
//	                outputs S' (float32 [P])
//	                attrs   tensors, world, rank, chunk, reduction, compress
//	                When sync is true, R is partition rank of the flat space of the G
//	                reduced over every process, and S' = fresh ? R : S + R; otherwise S' = S.
//	AllGather       inputs  sync (bool scalar), X_1..X_n; outputs X'_1..X'_n
//	                attrs   tensors, world, rank, chunk
//	                When sync is true, every partition of X' is the owning process's
//	                (partition rank is this process's X); otherwise X' = X.
const (
	AllReduceOp      = "AllReduce"
	AllReduceStartOp = "AllReduceStart"
	AllReduceWaitOp  = "AllReduceWait"
	ReduceScatterOp  = "ReduceScatter"
	AllGatherOp      = "AllGather"
)

// CollectiveOps lists the multi-tensor collective ops.
var CollectiveOps = []string{AllReduceOp, AllReduceStartOp, AllReduceWaitOp, ReduceScatterOp, AllGatherOp}

// IsCollectiveOp reports whether n is one of the multi-tensor collective
// ops (AllReduce, AllReduceStart, AllReduceWait).
func IsCollectiveOp(n *Node) bool {
	if n.Domain != InternalDomain {
		return false
	}
	for _, op := range CollectiveOps {
		if n.OpType == op {
			return true
		}
	}
	return false
}

// collectiveLayout checks a collective node (one leading sync input, then
// n tensors, n outputs) and returns, for each output, the input it
// replaces.
func collectiveLayout(n *Node) ([]int, error) {
	if n.OpType == ReduceScatterOp || n.OpType == AllGatherOp {
		world, rank, chunk := n.AttrInt("world", 0), n.AttrInt("rank", -1), n.AttrInt("chunk", 0)
		if world < 1 || rank < 0 || rank >= world || chunk < 1 {
			return nil, n.Errorf("attributes world=%d, rank=%d, chunk=%d (want world ≥ 1, 0 ≤ rank < world, chunk ≥ 1)", world, rank, chunk)
		}
	}
	if n.OpType == ReduceScatterOp {
		if len(n.Inputs) < 4 || len(n.Outputs) != 1 {
			return nil, n.Errorf("ReduceScatter takes sync, fresh, S and at least one tensor (has %d inputs) and makes S' (has %d outputs)", len(n.Inputs), len(n.Outputs))
		}
		if t := n.AttrInt("tensors", int64(len(n.Inputs)-3)); int(t) != len(n.Inputs)-3 {
			return nil, n.Errorf("attribute tensors=%d but the node has %d tensors", t, len(n.Inputs)-3)
		}
		return []int{2}, nil
	}
	if len(n.Inputs) < 2 {
		return nil, n.Errorf("%s needs the sync flag and at least one tensor, has %d inputs", n.OpType, len(n.Inputs))
	}
	k := len(n.Inputs) - 1
	if t := n.AttrInt("tensors", int64(k)); int(t) != k {
		return nil, n.Errorf("attribute tensors=%d but the node has %d tensors", t, k)
	}
	if len(n.Outputs) != k {
		return nil, n.Errorf("%d outputs, want %d (one per tensor)", len(n.Outputs), k)
	}
	if n.OpType != AllReduceWaitOp && n.OpType != AllGatherOp {
		switch r := n.AttrString("reduction", "mean"); r {
		case "sum", "mean":
		default:
			return nil, n.Errorf("reduction %q (want sum or mean)", r)
		}
		switch c := n.AttrString("compress", ""); c {
		case "", "bf16":
		default:
			return nil, n.Errorf("compress %q (want \"\" or bf16)", c)
		}
	}
	upd := make([]int, k)
	for j := range upd {
		upd[j] = j + 1
	}
	return upd, nil
}

// CheckCollectives checks the pairing of g's AllReduceStart and
// AllReduceWait nodes: every Start's outputs are read by exactly one
// AllReduceWait of the same bucket, which reads nothing else but the sync
// flag, and no two Starts share a bucket. A pass that inserts the ops runs
// it; a backend may rely on it.
func CheckCollectives(g *Graph) error {
	readers := map[string][]*Node{}
	for _, n := range g.Nodes {
		for _, in := range n.Inputs {
			readers[in] = append(readers[in], n)
		}
	}
	outs := map[string]bool{}
	for _, o := range g.Outputs {
		outs[o.Name] = true
	}
	buckets := map[int64]*Node{}
	for _, n := range g.Nodes {
		if !IsCollectiveOp(n) {
			continue
		}
		if _, err := collectiveLayout(n); err != nil {
			return err
		}
		if n.OpType != AllReduceStartOp {
			continue
		}
		b := n.AttrInt("bucket", 0)
		if other := buckets[b]; other != nil {
			return n.Errorf("bucket %d is also started by %s", b, other.Label())
		}
		buckets[b] = n
		var wait *Node
		for _, o := range n.Outputs {
			r := readers[o]
			if len(r) != 1 || outs[o] {
				return n.Errorf("in-flight output %q must be read by one AllReduceWait only (it has %d readers)", o, len(r)+btoi(outs[o]))
			}
			if r[0].OpType != AllReduceWaitOp || r[0].Domain != InternalDomain || r[0].AttrInt("bucket", 0) != b {
				return n.Errorf("in-flight output %q is read by %s, not by the AllReduceWait of bucket %d", o, r[0].Label(), b)
			}
			if wait != nil && wait != r[0] {
				return n.Errorf("its outputs are read by two waits, %s and %s", wait.Label(), r[0].Label())
			}
			wait = r[0]
		}
		if len(wait.Inputs) != len(n.Inputs) {
			return wait.Errorf("waits for %d tensors, its start %s has %d", len(wait.Inputs)-1, n.Label(), len(n.Inputs)-1)
		}
		for j := 1; j < len(wait.Inputs); j++ {
			if wait.Inputs[j] != n.Outputs[j-1] {
				return wait.Errorf("input %d is %q, want %q (output %d of %s)", j, wait.Inputs[j], n.Outputs[j-1], j-1, n.Label())
			}
		}
	}
	return nil
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

func init() {
	for _, op := range CollectiveOps {
		internalInferRules[op] = inferCollectiveOp
	}
}

// inferCollectiveOp types each output as the tensor it replaces.
func inferCollectiveOp(c *inferCall) error {
	upd, err := collectiveLayout(c.n)
	if err != nil {
		return err
	}
	if dt := c.dtype(0); dt != Undefined && dt != Bool {
		return c.errorf("input 0 (sync) is %v, want bool", dt)
	}
	if c.n.OpType == ReduceScatterOp {
		s, ok := c.shape(2)
		c.setShapeOrUnranked(0, Float32, s, ok)
		return nil
	}
	for j, in := range upd {
		t := c.typ(in)
		if t == nil {
			continue
		}
		if t.DType != Undefined && t.DType != Float32 {
			return c.errorf("input %d (%q) is %v; %s reduces float32 tensors", in, c.n.Input(in), t.DType, c.n.OpType)
		}
		s, ok := c.shape(in)
		c.setShapeOrUnranked(j, t.DType, s, ok)
	}
	return nil
}
