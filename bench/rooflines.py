"""rooflines.py: what holdbars.py and holdranges.py share: reading a profile (or the median of
a hold's repeated profiles), and the rooflines. A product whose bytes at the triad
take longer than its arithmetic at the GEMM's rate (a few rows against a whole weight) cannot
reach 0.85 of the GEMM on any kernel: its roofline is the GEMM's time over the longer of the two.
`onnxtrain bench` writes it as roofline_of_gemm since 8 December 2026; for older profiles it is
computed here from the same fields. Such a product is held to the triad's bar, at its bytes over
its time."""
import glob
import json
import os
import re
import statistics

# Issue 14's bars: products at 0.85 of the 2048^3 GEMM, memory-bound ops at half the triad.
GEMM_BAR, TRIAD_BAR = 0.85, 0.5

_NUMBERS = ('ms_per_step', 'of_gemm', 'of_triad', 'gflop_per_step', 'gb_per_step', 'roofline_of_gemm')


def read_profile(path):
    """The JSON line of one `onnxtrain bench --log-format json` output."""
    with open(path) as f:
        return json.loads([line for line in f if line.startswith('{')][0])


def repeat_index(path):
    """K for a repeat bench/hold.sh wrote (PROFILE_RUNS: prof_vit1.rK.json beside
    prof_vit1.json), None for a first run."""
    m = re.search(r'\.r(\d+)\.[^./]+$', path)
    return int(m.group(1)) if m else None


def repeats(path):
    """path and the repeats bench/hold.sh wrote beside it (prof_vit1.json, then
    prof_vit1.r2.json, prof_vit1.r3.json, ...)."""
    stem, ext = os.path.splitext(path)
    more = [p for p in glob.glob(glob.escape(stem) + '.r*' + ext) if repeat_index(p) is not None]
    return [path] + sorted(more, key=repeat_index)


def median_profile(paths):
    """One profile from several runs of the same model and build: per op row (by its op string)
    the median of each number over the runs that have the row, the step and the references the
    median over all runs; 'runs' says how many there were."""
    ds = [read_profile(p) for p in paths]
    if len(ds) == 1:
        ds[0]['runs'] = 1
        return ds[0]
    out = dict(ds[0])
    out['runs'] = len(ds)
    out['median_step_ms'] = statistics.median(d['median_step_ms'] for d in ds)
    out['op_profile_refs'] = {k: statistics.median(d['op_profile_refs'][k] for d in ds)
                              for k in ('gemm_gflops', 'triad_gbps')}
    rows, order = {}, []
    for d in ds:
        for o in d['op_profile']:
            if o['op'] not in rows:
                order.append(o['op'])
            rows.setdefault(o['op'], []).append(o)
    out['op_profile'] = []
    for op in order:
        m = dict(rows[op][0])
        for k in _NUMBERS:
            vals = [o[k] for o in rows[op] if k in o]
            if vals:
                m[k] = statistics.median(vals)
        out['op_profile'].append(m)
    return out


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


def bar(o, refs):
    """Which bar a profile row is held to and its rate against it: ('gemm', of_gemm, 1) for a
    product its bytes let reach the GEMM's bar, ('triad', of_triad, roofline) for a product they
    do not (of_triad None when the row has no time), ('triad', of_triad, None) for another op
    with a rate, None for a row without one."""
    if 'of_gemm' in o:
        roof, of_triad = roofline(o, refs)
        if roof < GEMM_BAR:
            return 'triad', of_triad, roof
        return 'gemm', o['of_gemm'], 1
    if 'of_triad' in o:
        return 'triad', o['of_triad'], None
    return None



def is_part(o):
    """Whether a profile row is a product inside a fused op (OP/part), whose time its op's row
    already holds."""
    return '/' in o['op'].split(' ')[0]


def shortfall(o, held):
    """The milliseconds a step a row loses to the GEMM's bar, held as bar() holds it: for a
    product held to the GEMM's bar and under it, not a part of a fused op; else 0."""
    if held is None or is_part(o):
        return 0.0
    kind, rate, _ = held
    if kind != 'gemm' or rate is None or rate >= GEMM_BAR:
        return 0.0
    return o['ms_per_step'] * (1 - rate / GEMM_BAR)
