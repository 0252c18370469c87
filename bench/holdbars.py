#!/usr/bin/python3
"""holdbars.py PROFILE.json...: the rows of `onnxtrain bench --op-profile-by-shape --log-format
json` under issue 14's bars (products under 0.85 of the 2048³ GEMM, other ops under 0.50 of the
triad, both measured before and after the steps), with their milliseconds a step, and how many
milliseconds a step the products lose to the bar. Rows named OP/part are parts of a fused op's
row (its products), listed but not summed again. A product whose bytes at the triad cap it under
0.85 of the GEMM (rooflines.py) is held to the triad's bar instead: listed as R (its rate of the
triad, then its roofline) when under half the triad, and not summed into the products' loss. Where
bench/hold.sh repeated the profiles (PROFILE_RUNS, PROF.rN.json beside PROF.json), each number is
the median over the runs."""
import sys

from rooflines import GEMM_BAR, TRIAD_BAR, bar, is_part, median_profile, repeat_index, repeats, shortfall

for f in sys.argv[1:]:
    if repeat_index(f) is not None:
        continue  # a repeat: read with its first run
    d = median_profile(repeats(f))
    r = d['op_profile_refs']
    runs = ' (each number the median of %d runs)' % d['runs'] if d['runs'] > 1 else ''
    print("== %s step %.0f ms, gemm %.1f GFLOP/s, triad %.1f GB/s%s" % (f, d['median_step_ms'], r['gemm_gflops'], r['triad_gbps'], runs))
    products = short = 0.0
    floor = {'products': 0.0, 'memory': 0.0, 'other': 0.0,
             'optimizer': d.get('optimizer_bytes', 0) / r['triad_gbps'] / 1e6}
    for o in d['op_profile']:
        part = is_part(o)
        if not part:
            if o.get('gflop_per_step'):
                floor['products'] += o['gflop_per_step'] / r['gemm_gflops'] * 1e3
            elif o.get('gb_per_step'):
                floor['memory'] += o['gb_per_step'] / r['triad_gbps'] * 1e3
            elif not o['op'].split(' ')[0].endswith(('Update', 'UpdateGathered')):  # in 'optimizer'
                floor['other'] += o['ms_per_step']
        if 'of_gemm' in o and not part:
            products += o['ms_per_step']
        held = bar(o, r)
        if held is None or held[1] is None:
            continue
        kind, rate, roof = held
        if kind == 'gemm' and rate < GEMM_BAR:
            short += shortfall(o, held)
            print("  P %.2f %7.1f ms  %s%s" % (rate, o['ms_per_step'], o['op'][:150], " (part of its op)" if part else ""))
        elif kind == 'triad' and rate < TRIAD_BAR and roof is not None:
            print("  R %.2f %7.2f ms  %s (roofline %.2f of the GEMM, at %.2f of it)" % (rate, o['ms_per_step'], o['op'][:150], roof, o['of_gemm']))
        elif kind == 'triad' and rate < TRIAD_BAR:
            print("  M %.2f %7.2f ms  %s" % (rate, o['ms_per_step'], o['op'][:150]))
    print("  products %.0f ms a step; %.1f ms short of %.2f" % (products, short, GEMM_BAR))
    total = sum(floor.values())
    print("  floor %.0f ms (products %.0f at the GEMM, memory-bound %.0f and the update %.0f at the triad, the rest %.0f as run): the step %.2f of it"
          % (total, floor['products'], floor['memory'], floor['optimizer'], floor['other'], d['median_step_ms'] / total))
