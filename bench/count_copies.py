import re,sys
# bytes copied by one training step of an emitted CUDA program (shardc plan ... --emit-c): every rt_cu_copy
# and rt_cu_copy_block in step(), those inside a layer loop `for (int64_t i1 ...; i1 < N ...` (or reverse from N-1) counted N times
src=open(sys.argv[1]).read()
step=src[src.index('static void step('):]
step=step[:step.index('\nstatic void ',1)]
total=0; fwd=0; depth_mult=[1]
mult=1
prev=''
for line in step.split('\n'):
    guard = prev.strip().startswith('if (c') and '!=' in prev  # a carry's copy only where it moved: the first iteration
    prev=line
    m=re.search(r'for \(int64_t i1 = 0; i1 < (\d+);',line) or re.search(r'for \(int64_t i1 = (\d+); i1 >= 0;',line)
    if m:
        n=int(m.group(1)); mult = n if '<' in line else n+1; continue
    if re.match(r'^  }$',line): mult=1
    for c in re.finditer(r'rt_cu_copy_block\(ctx, [^;]*?, (\d+), (\d+), (\d+), (\d+)\);',line):
        o,r,i,e=map(int,c.groups()); total+=(1 if guard else mult)*o*r*i*e
    for c in re.finditer(r'rt_cu_copy\(ctx, .*?, (\d+)\);',line):
        total+=(1 if guard else mult)*int(c.group(1))
print("%s: %.3f GB copied a step" % (sys.argv[1], total/1e9))
