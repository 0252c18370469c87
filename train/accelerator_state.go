package train

import (
	"encoding/binary"
	"encoding/json"
	"fmt"

	"github.com/onnxtrain/onnxtrain/backend"
	"github.com/onnxtrain/onnxtrain/graph"
)

// Position is where training is: optimizer steps taken and the data
// consumed of the current epoch.
type Position struct {
	Step, Epoch, BatchInEpoch int
}

// Position reports the current step and data position. After the last
// batch of an epoch BatchInEpoch equals the number of batches.
func (a *Accelerator) Position() Position {
	return Position{Step: a.step, Epoch: a.epoch, BatchInEpoch: a.batchInEpoch}
}

// CheckpointCounter numbers the checkpoints saved so far in the run (it
// survives a resume).
func (a *Accelerator) CheckpointCounter() int { return a.counter }

// SaveState writes everything needed to resume exactly into dir (see
// SaveState in checkpoint.go for the format and the atomic protocol): the
// model's parameters and buffers, the optimizer state, the step and data
// position, the RNG states, the checkpoint counter and the registered
// objects. Only the main process writes, except under ZeRO, where every
// process writes its optimizer shard (zero.go): call it on every process.
func (a *Accelerator) SaveState(dir string) error {
	if len(a.models) == 0 || len(a.opts) == 0 {
		return fmt.Errorf("accelerator: SaveState needs a prepared model and optimizer")
	}
	a.counter++
	if a.zeroStage() > 0 {
		return a.saveZeroState(dir) // zero.go: every rank writes its optimizer shard
	}
	if !a.IsMainProcess() {
		return nil
	}
	st, err := a.stateToSave()
	if err != nil {
		return err
	}
	return SaveState(dir, st)
}

// stateToSave collects what SaveState writes.
func (a *Accelerator) stateToSave() (*State, error) {
	m := a.models[0]
	st := &State{
		Step: a.step, Epoch: a.epoch, BatchInEpoch: a.batchInEpoch,
		Params: map[string]*graph.Tensor{}, Buffers: map[string]*graph.Tensor{},
		Optimizer:         a.opts[0].Inner.State(),
		Schedule:          map[string]any{"step": a.step},
		RNG:               map[string][]byte{},
		CheckpointCounter: a.counter,
		Extra:             map[string]json.RawMessage{},
		LossScaler:        a.ampCheckpoint(), // amp.go
	}
	if err := m.Prog.SyncToHost(); err != nil {
		return nil, err
	}
	for _, p := range m.Prog.Params {
		st.Params[p.Name] = p.Value
	}
	for name, t := range m.Prog.Buffers {
		st.Buffers[name] = t
	}
	if s, err := m.Prog.RNGState(); err != nil {
		return nil, err
	} else if s != nil {
		st.RNG["dropout"] = s
	}
	st.RNG["data_seed"] = binary.LittleEndian.AppendUint64(nil, uint64(a.cfg.Seed))
	if len(a.scheds) > 0 {
		st.Schedule["lr"] = a.scheds[0].LR()
	}
	for name, c := range a.extra {
		b, err := c.StateDict()
		if err != nil {
			return nil, fmt.Errorf("accelerator: state of %q: %w", name, err)
		}
		st.Extra[name] = b
	}
	return st, nil
}

// LoadState restores what SaveState wrote, after checking that the
// checkpoint fits the prepared model (every mismatch is listed). The
// prepared loaders resume mid-epoch at the saved position.
func (a *Accelerator) LoadState(dir string) error {
	if len(a.models) == 0 || len(a.opts) == 0 {
		return fmt.Errorf("accelerator: LoadState needs a prepared model and optimizer")
	}
	st, err := LoadState(dir)
	if err != nil {
		return err
	}
	m := a.models[0]
	params := map[string]*graph.Tensor{}
	for _, p := range m.Prog.Params {
		params[p.Name] = p.Value
	}
	if err := CheckCompatible(st, params, m.Prog.Buffers); err != nil {
		return err
	}
	for name, t := range st.Params {
		copyInto(params[name], t)
	}
	for name, t := range st.Buffers {
		copyInto(m.Prog.Buffers[name], t)
	}
	if err := m.Prog.SyncFromHost(); err != nil {
		return err
	}
	opt := st.Optimizer
	if m.zero != nil {
		opt = m.zero.slice(opt) // zero.go: this rank's slices of whole tensors
	}
	if err := a.opts[0].Inner.LoadState(opt); err != nil {
		return fmt.Errorf("accelerator: %s: %w", dir, err)
	}
	if s, ok := st.RNG["dropout"]; ok {
		if err := m.Prog.SetRNGState(s); err != nil {
			return fmt.Errorf("accelerator: %s: %w", dir, err)
		}
	}
	if err := a.ampRestore(st.LossScaler); err != nil { // amp.go
		return fmt.Errorf("accelerator: %s: %w", dir, err)
	}
	for name, c := range a.extra {
		if b, ok := st.Extra[name]; ok {
			if err := c.LoadStateDict(b); err != nil {
				return fmt.Errorf("accelerator: %s: state of %q: %w", dir, name, err)
			}
		}
	}
	a.step, a.epoch, a.batchInEpoch, a.counter = st.Step, st.Epoch, st.BatchInEpoch, st.CheckpointCounter
	a.micro = 0
	m.fresh = true
	for _, s := range a.scheds {
		s.opt.Inner.SetLR(s.Inner.LR(a.step))
	}
	return nil
}

// ResumePoint is the epoch to continue with and the batches of it to skip,
// for a loader of n batches per epoch.
func (p Position) ResumePoint(n int) (epoch, skip int) {
	if p.BatchInEpoch >= n {
		return p.Epoch + 1, 0
	}
	return p.Epoch, p.BatchInEpoch
}

// RNGState returns the state of the training program's random generator
// (Dropout masks), or nil when the backend keeps none.
func (p *Program) RNGState() ([]byte, error) {
	if s, ok := p.trainExe.(backend.RandomState); ok {
		return s.RandomState()
	}
	return nil, nil
}

// SetRNGState restores a state RNGState returned.
func (p *Program) SetRNGState(b []byte) error {
	if s, ok := p.trainExe.(backend.RandomState); ok {
		return s.SetRandomState(b)
	}
	return nil
}
