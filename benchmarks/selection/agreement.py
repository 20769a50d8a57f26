"""Agreement between the two readers of the labelled corpus (run from benchmarks/selection/corpus/):
raw agreement, Cohen's kappa and F1 on keep=true, per person, per kind and overall."""
import json,os,collections
k=lambda r:(r['run_id'],r['json_path'],r['start'],r['end'],r['topic_id'])
def stats(pairs):
    n=len(pairs); tp=sum(1 for a,b in pairs if a and b); fp=sum(1 for a,b in pairs if b and not a)
    fn=sum(1 for a,b in pairs if a and not b); tn=n-tp-fp-fn
    po=(tp+tn)/n if n else 0
    pa=(tp+fn)/n; pb=(tp+fp)/n
    pe=pa*pb+(1-pa)*(1-pb)
    kappa=(po-pe)/(1-pe) if pe<1 else float('nan')
    # F1 of B against A (A as reference): P=tp/(tp+fp), R=tp/(tp+fn); F1 symmetric
    P=tp/(tp+fp) if tp+fp else float('nan'); R=tp/(tp+fn) if tp+fn else float('nan')
    f1=2*tp/(2*tp+fp+fn) if (2*tp+fp+fn) else float('nan')
    return dict(n=n,A_keep=tp+fn,B_keep=tp+fp,both=tp,raw=po,kappa=kappa,P_BvsA=P,R_BvsA=R,F1=f1)
allp={}; missing={}
for f in sorted(os.listdir('labels_b')):
    p=f[:-6]
    A={k(r):r['keep'] for r in map(json.loads,open('labels/'+f))}
    B=[json.loads(l) for l in open('labels_b/'+f)]
    pairs=[]; miss=0
    for r in B:
        if k(r) in A: pairs.append((A[k(r)],r['keep']))
        else: miss+=1
    allp[p]=(pairs,B); missing[p]=miss
rows=[]
for p,(pairs,B) in allp.items(): rows.append((p,stats(pairs),missing[p]))
for kind in ('chat','agent'):
    pr=[x for p,(pairs,B) in allp.items() if p.startswith(kind) for x in pairs]
    rows.append((f'ALL {kind}',stats(pr),sum(missing[p] for p in allp if p.startswith(kind))))
rows.append(('ALL',stats([x for p,(pairs,B) in allp.items() for x in pairs]),sum(missing.values())))
fmt=lambda v: 'n/a' if v!=v else f'{v:.2f}'
print('| person | rows | unmatched | A keep | B keep | both | raw agreement | Cohen κ | P (B vs A) | R (B vs A) | F1 |')
print('|---|---|---|---|---|---|---|---|---|---|---|')
for p,s,m in rows:
    print(f"| {p} | {s['n']} | {m} | {s['A_keep']} | {s['B_keep']} | {s['both']} | {fmt(s['raw'])} | {fmt(s['kappa'])} | {fmt(s['P_BvsA'])} | {fmt(s['R_BvsA'])} | {fmt(s['F1'])} |")
