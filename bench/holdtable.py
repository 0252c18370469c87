#!/usr/bin/python3
"""holdtable.py HOLDDIR: the markdown table of a bench/hold.sh run (its large.json and
large_avx2.json from compare.py): each round's step on both sides, the speed ratio of the best
rounds and onnxtrain's peak RSS over PyTorch's, with AVX-512 and with both sides on AVX2. A PyTorch
round marked p or d was PyTorch's faster with OMP_WAIT_POLICY=PASSIVE or with OpenMP's default."""
import json
import sys

h = sys.argv[1]
a = json.load(open(h + '/large.json'))
b = json.load(open(h + '/large_avx2.json'))
names = {'resnet50-sgd': 'ResNet-50, SGD', 'resnet50-adamw': 'ResNet-50, AdamW', 'vit_b16-sgd': 'ViT-B/16, SGD',
         'vit_b16-adamw': 'ViT-B/16, AdamW', 'gpt-sgd': 'GPT 162M, SGD', 'gpt-adamw': 'GPT 162M, AdamW'}


def rounds(d, case, side):
    # p or d after a PyTorch round: the OpenMP wait policy that won it (compare.py's --omp-wait-policy best)
    mark = {'PASSIVE': 'p', 'default': 'd'}
    return ' / '.join(format(round(r['median_step_ms']), ',') + mark.get(r.get('omp_wait_policy'), '')
                      for r in d['raw'][case][side])


print('| case | PyTorch ms (AVX-512 rounds) | onnxtrain ms | speed | PyTorch ms (AVX2 rounds) | onnxtrain ms | speed | onnxtrain/PyTorch peak RSS |')
print('| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |')
for ra, rb in zip(a['rows'], b['rows']):
    c = ra['case']
    print('| %s | %s | %s | %.2f | %s | %s | %.2f | %.2f / %.2f |' % (
        names.get(c, c), rounds(a, c, 'pytorch'), rounds(a, c, 'onnxtrain'), ra['pt_ms'] / ra['ot_ms'],
        rounds(b, c, 'pytorch'), rounds(b, c, 'onnxtrain'), rb['pt_ms'] / rb['ot_ms'],
        ra['ot_rss'] / ra['pt_rss'], rb['ot_rss'] / rb['pt_rss']))
