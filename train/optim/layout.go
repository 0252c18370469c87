package optim

import "github.com/onnxtrain/onnxtrain/backend"

// StateLayout names the state buffers of a bound step program where they
// are not the defaults of Binder (the parameter's name for its value,
// "<param>/<slot>" for its slots, the gradient fed as an input). ZeRO
// (train/program_zero.go) uses it to step this process's slices of the
// parameters: views of the parameters' buffers and of the reduced
// gradients' partition (backend.StateViewer).
type StateLayout interface {
	// ValueState names the buffer of the parameter's value.
	ValueState(param string) string
	// GradState names a buffer that holds the parameter's gradient, read
	// by the program (Param.Grad then only gives its dtype and shape), or
	// is "" for a gradient fed as an input.
	GradState(param string) string
	// SlotState names the buffer of one of the parameter's slots
	// ("momentum_buffer", "exp_avg", ...).
	SlotState(param, slot string) string
}

// LayoutBinder is implemented by the optimizers of this package: BindLayout
// is Binder's Bind with the state buffers named by layout. The buffers
// layout names for values and gradients must exist in share's state; the
// slots are added to it, as with Bind.
type LayoutBinder interface {
	BindLayout(be backend.Backend, share backend.Executable, layout StateLayout)
}

// BindLayout implements LayoutBinder.
func (o *SGD) BindLayout(be backend.Backend, share backend.Executable, layout StateLayout) {
	o.prog = stepProgram{be: be, share: share, layout: layout}
}

// BindLayout implements LayoutBinder.
func (o *Adam) BindLayout(be backend.Backend, share backend.Executable, layout StateLayout) {
	o.prog = stepProgram{be: be, share: share, layout: layout}
}

// valueState, gradState and slotState name the buffers of parameter
// param's value, gradient ("": an input) and slots in the step program.
func (s *stepProgram) valueState(param string) string {
	if s.layout == nil {
		return param
	}
	return s.layout.ValueState(param)
}

func (s *stepProgram) gradState(param string) string {
	if s.layout == nil {
		return ""
	}
	return s.layout.GradState(param)
}

func (s *stepProgram) slotState(param, slot string) string {
	if s.layout == nil {
		return param + "/" + slot
	}
	return s.layout.SlotState(param, slot)
}
