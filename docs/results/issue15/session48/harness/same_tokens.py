# Per-token times of a cap-4 run against the same tokens (rep, step) of a cap-8 run: median extra token time and
# lm_head time by the token's misses. Args: BASELINE_CAP8 RUN...  (files from miss_ops with PER_TOKEN=1: rep step misses token_us lm_head_us)
import sys, statistics as st
def load(f): return {(int(a),int(b)):(int(c),float(d),float(e)) for a,b,c,d,e in (l.split() for l in open(f) if not l.startswith('short'))}
c8=load(sys.argv[1])
for f in sys.argv[2:]:
  c=load(f)
  out=[]
  for m in range(0,3):
    ks=[k for k in c if c[k][0]==m]
    if not ks: continue
    out.append(f"m{m} n{len(ks)} lm +{st.median(c[k][2]-c8[k][2] for k in ks):.0f} tok +{st.median(c[k][1]-c8[k][1] for k in ks):.0f}")
  print(f.split('/')[-1], ' | '.join(out))
