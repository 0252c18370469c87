package nn

// WinogradPasses reports which of g's passes take Winograd's transform under
// its policy (g.Winograd) instead of the implicit GEMM (which copies its padded
// operand): the forward pass, the filter gradient, the input gradient.
// Memory estimates use it to replay the kernels' scratch requests.
func (g *Conv2D) WinogradPasses() (forward, filterGrad, inputGrad bool) {
	if cv, ok := g.winoForwardConv(); ok && winoUse(g.Winograd, &cv) {
		forward = true
	}
	filterGrad = g.wgradEligible() && g.wgradUse()
	if cv, ok := g.winoInputGradConv(); ok && winoUse(g.Winograd, &cv) {
		inputGrad = true
	}
	return forward, filterGrad, inputGrad
}
