#!/usr/bin/python3
"""stepab.py MODEL ROUNDS OUTDIR NAME:BINARY[:ENV=V,ENV=V] ...: builds (or settings) against each
other in one model's training step. Each round runs every variant once, alternating, with
`onnxtrain bench --op-profile-by-shape` (SGD, momentum 0.9, STEPS timed steps, default 3); then
prints each variant's step medians and the shapes whose milliseconds differ most between the
first and the last variant (TOP rows, default 14), each as its share of the GEMM or triad
measured before and after the steps and its ms a step. MODEL is resnet50, vit or gpt, exported by
compare.export_large into EXPORTS (default /tmp/lead/keep)."""
import json
import os
import statistics
import subprocess
import sys

model, rounds, out = sys.argv[1], int(sys.argv[2]), sys.argv[3]
variants = []
for v in sys.argv[4:]:
    parts = v.split(':')
    env = dict(kv.split('=', 1) for kv in parts[2].split(',')) if len(parts) > 2 else {}
    variants.append((parts[0], parts[1], env))
k = os.environ.get('EXPORTS', '/tmp/lead/keep')
args = {'resnet50': ['--model', k + '/resnet50.onnx', '--batch-size', '8', '--lr', '0.01'],
        'vit': ['--model', k + '/vit_b16.onnx', '--batch-size', '4', '--lr', '0.01'],
        'gpt': ['--model', k + '/gpt.onnx', '--batch-size', '4', '--loss', 'output:loss', '--int-high', '50257']}[model]
os.makedirs(out, exist_ok=True)
runs = {name: [] for name, _, _ in variants}
for r in range(rounds):
    for name, binary, env in variants:
        e = dict(os.environ, GOMAXPROCS='2', **env)
        cmd = [binary, 'bench'] + args + ['--steps', os.environ.get('STEPS', '3'), '--warmup', '1', '--optimizer', 'sgd',
                                          '--momentum', '0.9', '--op-profile-by-shape', '--log-format', 'json']
        text = subprocess.run(cmd, env=e, capture_output=True, text=True).stdout
        open('%s/%s_%d.json' % (out, name, r), 'w').write(text)
        d = json.loads([l for l in text.splitlines() if l.startswith('{')][0])
        runs[name].append(d)
        print(name, r, 'step %.1f' % d['median_step_ms'], 'loss', d.get('last_loss'), flush=True)
for name, ds in runs.items():
    steps = [d['median_step_ms'] for d in ds]
    print(name, 'steps', ['%.0f' % s for s in steps], 'median %.1f' % statistics.median(steps))
rows = {}
for name, ds in runs.items():
    for d in ds:
        for o in d['op_profile']:
            key = 'of_gemm' if 'of_gemm' in o else 'of_triad' if 'of_triad' in o else None
            if key:
                rows.setdefault(o['op'], {}).setdefault(name, []).append((o[key], o['ms_per_step']))
names = [name for name, _, _ in variants]
diffs = []
for op, by in rows.items():
    if all(n in by for n in names):
        ms = [statistics.median(x[1] for x in by[n]) for n in names]
        share = [statistics.median(x[0] for x in by[n]) for n in names]
        diffs.append((abs(ms[0] - ms[-1]), op, share, ms))
for _, op, share, ms in sorted(diffs, reverse=True)[:int(os.environ.get('TOP', '14'))]:
    print('  ' + ' / '.join('%.2f %.1fms' % (a, b) for a, b in zip(share, ms)), op[:120])
