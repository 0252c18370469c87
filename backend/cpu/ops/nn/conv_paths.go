package nn

// Winograd reports which of g's passes take Winograd's transform under the
// current policy instead of the implicit GEMM (which copies its padded
// operand): the forward pass, the filter gradient, the input gradient.
// Memory estimates use it to replay the kernels' scratch requests.
func (g *Conv2D) Winograd() (forward, filterGrad, inputGrad bool) {
	if cv, ok := g.winoForwardConv(); ok && winoUse(&cv) {
		forward = true
	}
	filterGrad = g.wgradEligible() && g.wgradUse()
	if cv, ok := g.winoInputGradConv(); ok && winoUse(&cv) {
		inputGrad = true
	}
	return forward, filterGrad, inputGrad
}
