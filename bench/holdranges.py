#!/usr/bin/python3
"""holdranges.py HOLDDIR...: issue 14's criteria over several bench/hold.sh runs, as the status
table of docs/large-models.md states them: per case the speed against PyTorch's best round (the
range over the holds, with AVX-512 and with both sides on AVX2; cases under 1.3x marked), the
range of onnxtrain's peak RSS over PyTorch's, per profile the milliseconds a step the products
lose to 0.85 of the 2048^3 GEMM, and the memory-bound rows under half the triad with the holds
they were under in (products whose bytes cap them under 0.85 of the GEMM among them, with their
roofline: rooflines.py). Where a hold repeated its profiles (PROFILE_RUNS), each number is the
median over its runs. It reads what holdtable.py and holdbars.py read: large.json,
large_avx2.json and prof_*.json."""
import json
import os
import sys

from rooflines import GEMM_BAR, TRIAD_BAR, bar, median_profile, repeats, shortfall

CASES = ['resnet50-sgd', 'resnet50-adamw', 'vit_b16-sgd', 'vit_b16-adamw', 'gpt-sgd', 'gpt-adamw']
PROFILES = [('resnet50', 'ResNet-50'), ('vit', 'ViT-B/16'), ('gpt', 'GPT')]
SPEED_BAR, RSS_BAR = 1.3, 0.8


def span(xs, fmt='%.2f'):
    if not xs:
        return '-'
    lo, hi = min(xs), max(xs)
    return fmt % lo if lo == hi else (fmt + '–' + fmt) % (lo, hi)


def rows(path):
    with open(path) as f:
        return {r['case']: r for r in json.load(f)['rows']}


def start(h):
    # a hold is named by the time hold.sh wrote into its start file
    try:
        with open(os.path.join(h, 'start')) as f:
            return f.read().strip()
    except OSError:
        return os.path.basename(h.rstrip('/'))


def main(holds):
    if not holds:
        sys.exit(__doc__)
    speed = {(c, isa): [] for c in CASES for isa in ('avx512', 'avx2')}
    rss = []
    short = {}
    under = {}
    roofs = {}  # the products among them: their rooflines
    for h in holds:
        for isa, name in (('avx512', 'large.json'), ('avx2', 'large_avx2.json')):
            for c, r in rows(os.path.join(h, name)).items():
                speed.setdefault((c, isa), []).append(r['pt_ms'] / r['ot_ms'])
                rss.append(r['ot_rss'] / r['pt_rss'])
        for key, label in PROFILES:
            for isa, suffix in (('avx512', ''), ('avx2', '1')):
                path = os.path.join(h, 'prof_%s%s.json' % (key, suffix))
                if not os.path.exists(path):
                    continue
                d = median_profile(repeats(path))
                lost = 0.0
                for o in d['op_profile']:
                    held = bar(o, d['op_profile_refs'])
                    if held is None or held[1] is None:
                        continue
                    kind, rate, roof = held
                    if kind == 'gemm':
                        lost += shortfall(o, held)
                    elif rate < TRIAD_BAR and o.get('gb_per_step', 0) >= 0.001:
                        under.setdefault((label, o['op'][:110]), []).append((start(h), isa, rate))
                        if roof is not None:  # a product its bytes hold to the triad
                            roofs.setdefault((label, o['op'][:110]), []).append(roof)
                short.setdefault((label, isa), []).append(lost)
    print('holds: ' + ', '.join('%s (%s)' % (h, start(h)) for h in holds))
    print('\n| case | speed, AVX-512 | speed, AVX2 |')
    print('| --- | ---: | ---: |')
    for c in CASES:
        cells = []
        for isa in ('avx512', 'avx2'):
            xs = speed[(c, isa)]
            low = sum(x < SPEED_BAR for x in xs)
            cells.append(span(xs) + (' (%d of %d under %.1f)' % (low, len(xs), SPEED_BAR) if low else ''))
        print('| %s | %s | %s |' % (c, cells[0], cells[1]))
    print('\npeak RSS over PyTorch\'s: %s (bar %.1f)' % (span(rss), RSS_BAR))
    print('\n| profile | products short of %.2f of the GEMM, ms a step, AVX-512 | AVX2 |' % GEMM_BAR)
    print('| --- | ---: | ---: |')
    for _, label in PROFILES:
        print('| %s | %s | %s |' % (label, span(short.get((label, 'avx512'), []), '%.0f'), span(short.get((label, 'avx2'), []), '%.0f')))
    print('\nmemory-bound rows under %.1f of the triad (1 MB a step or more), by hold start and instruction set:' % TRIAD_BAR)
    for (label, op), seen in sorted(under.items()):
        roof = roofs.get((label, op))
        note = ' (a product whose bytes allow %s of the GEMM)' % span(roof) if roof else ''
        print('- %s: %s%s — %s' % (label, op, note, ', '.join('%s %s %.2f' % s for s in seen)))


if __name__ == '__main__':
    main(sys.argv[1:])
