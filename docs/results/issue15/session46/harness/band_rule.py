# For stored grids: would choosing threads by the band (a lead inside the chosen set's own band does not count) pick better?
import json, re, subprocess, sys
cases = [
 ('s43 h100 tiny', 'docs/results/issue15/session43/h100/1-olmoe-tiny/profile.toml', 'docs/results/issue15/session43/h100/1-olmoe-tiny/sweep-tiny.json', '/tmp/tiny-demo.coli'),
 ('s43 h100 olmoe', 'docs/results/issue15/session43/h100/1-olmoe-tiny/profile.toml', 'docs/results/issue15/session43/h100/1-olmoe-tiny/sweep-olmoe.json', '/tmp/olmoe-predict.coli'),
 ('s44 h100 tiny', 'docs/results/issue15/session44/h100/1-olmoe-tiny/profile.toml', 'docs/results/issue15/session44/h100/1-olmoe-tiny/sweep-tiny.json', '/tmp/tiny-demo.coli'),
 ('s44 h100 olmoe', 'docs/results/issue15/session44/h100/1-olmoe-tiny/profile.toml', 'docs/results/issue15/session44/h100/1-olmoe-tiny/sweep-olmoe.json', '/tmp/olmoe-predict.coli'),
 ('s45 h100 tiny', 'docs/results/issue15/session45/h100/profile.toml', 'docs/results/issue15/session45/h100/sweep-tiny.json', '/tmp/tiny-demo.coli'),
 ('s46a h100 tiny', '/tmp/s46/h100/g/profile.toml', '/tmp/s46/h100/g/sweep-tiny.json', '/tmp/tiny-demo.coli'),
 ('s46a h100 olmoe', '/tmp/s46/h100/g/profile.toml', '/tmp/s46/h100/g/sweep-olmoe.json', '/tmp/olmoe-predict.coli'),
 ('s46b h100 tiny', '/tmp/s46/h100b/g/profile.toml', '/tmp/s46/h100b/g/sweep-tiny.json', '/tmp/tiny-demo.coli'),
 ('s46b h100 olmoe', '/tmp/s46/h100b/g/profile.toml', '/tmp/s46/h100b/g/sweep-olmoe.json', '/tmp/olmoe-predict.coli'),
 ('s45 vm tiny', 'docs/results/issue15/session45/vm/final/profile.toml', 'docs/results/issue15/session45/vm/final/sweep-tiny.json', '/tmp/tiny-demo.coli'),
 ('s45 vm olmoe', 'docs/results/issue15/session45/vm/final/profile.toml', 'docs/results/issue15/session45/vm/final/sweep-olmoe.json', '/tmp/olmoe-predict.coli'),
 ('s44 vm tiny', 'docs/results/issue15/session44/vm/profile.toml', 'docs/results/issue15/session44/vm/sweep-tiny.json', '/tmp/tiny-demo.coli'),
 ('s44 vm olmoe', 'docs/results/issue15/session44/vm/profile.toml', 'docs/results/issue15/session44/vm/sweep-olmoe.json', '/tmp/olmoe-predict.coli'),
 ('s46 vm tiny', '/tmp/s46/probe.toml', '/tmp/s46/tiny-split/sweep.json', '/tmp/tiny-demo.coli'),
]
for name, prof, sweep, model in cases:
    try: d = json.load(open(sweep))
    except Exception as e: print(name, 'no sweep', e); continue
    measured = {}
    for c in d['configs']:
        if c['resident'] and c['pins'] == 0 and c.get('gpu','cpu') == 'cpu' and 'pp' not in c['thread_set']:
            measured[c['threads']] = c['decode']['median_tok_s']
    rows = []
    for t in sorted(measured):
        out = subprocess.run(['build/tools/coli-plan', '--profile', prof, '--model', model, '--threads', str(t), '--gpu', 'none', '--offline', '--prompt-tokens', '512'], capture_output=True, text=True).stdout
        med = float(re.search(r'^\s+decode\s+([\d.]+) tok/s', out, re.M).group(1))
        band = re.search(r'band\s+decode ([\d.]+)-([\d.]+)', out)
        lo = float(band.group(1)) if band else med
        rows.append((t, med, lo, measured[t]))
    by_med = max(rows, key=lambda r: r[1]); 
    # band rule: others whose median is within the chosen's band and whose slowest beats the chosen's slowest
    cands = [r for r in rows if r[1] >= by_med[2]]
    by_band = max(cands, key=lambda r: r[2])
    best = max(rows, key=lambda r: r[3])
    fmt = lambda r: f"{r[0]}t"
    print(f"{name:16s} " + "  ".join(f"{t}t med {m:.0f} lo {l:.0f} meas {x:.0f}" for t,m,l,x in rows) +
          f" | median-rule {fmt(by_med)} ({by_med[3]/best[3]*100:.0f}%), band-rule {fmt(by_band)} ({by_band[3]/best[3]*100:.0f}%)")
