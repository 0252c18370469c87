"""rooflines.py: what holdbars.py and holdranges.py share. A product whose bytes at the triad
take longer than its arithmetic at the GEMM's rate (a few rows against a whole weight) cannot
reach 0.85 of the GEMM on any kernel: its roofline is the GEMM's time over the longer of the two.
`onnxtrain bench` writes it as roofline_of_gemm since 8 December 2026; for older profiles it is
computed here from the same fields. Such a product is held to the triad's bar, at its bytes over
its time."""


def roofline(o, refs):
    """The most of the 2048^3 GEMM's rate a product row's bytes allow (1 when compute-bound or
    unknown), and its rate of the triad where that is under 1 (else None; None too for a row
    without a time)."""
    if 'roofline_of_gemm' in o:
        roof = o['roofline_of_gemm']
    elif o.get('gflop_per_step') and o.get('gb_per_step'):
        roof = min(1.0, (o['gflop_per_step'] / refs['gemm_gflops']) / (o['gb_per_step'] / refs['triad_gbps']))
    else:
        return 1.0, None
    if roof >= 1 or not o.get('ms_per_step'):
        return roof, None
    return roof, o.get('of_triad', o['gb_per_step'] / (o['ms_per_step'] / 1e3) / refs['triad_gbps'])
