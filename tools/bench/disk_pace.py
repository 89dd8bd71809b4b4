#!/usr/bin/env python3
"""Random O_DIRECT reads of one record size, back to back or paced, 1 or 2 at once:
does this disk serve reads faster after idle gaps or in parallel than the probe's
back-to-back batches say? usage: disk_pace.py FILE [record_bytes]"""
import mmap, os, random, sys, time

path = sys.argv[1]
record = int(sys.argv[2]) if len(sys.argv) > 2 else 3 * 1024 * 1024 + 256 * 1024
record = (record + 4095) // 4096 * 4096
fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
blocks = os.fstat(fd).st_size // record
rng = random.Random(7)

def one_read(buf):
    off = rng.randrange(blocks) * record
    t = time.perf_counter()
    os.preadv(fd, [buf], off)
    return time.perf_counter() - t

bufs = [mmap.mmap(-1, record) for _ in range(4)]

from concurrent.futures import ThreadPoolExecutor
pool = ThreadPoolExecutor(4)

def batch(m):
    t = time.perf_counter()
    if m == 1:
        times = [one_read(bufs[0])]
    else:
        times = list(pool.map(lambda i: one_read(bufs[i]), range(m)))
    return time.perf_counter() - t, times

def test(name, m, gap_s, count):
    start = time.perf_counter()
    walls, reads = [], []
    for _ in range(count):
        w, r = batch(m)
        walls.append(w); reads += r
        if gap_s: time.sleep(gap_s)
    total = time.perf_counter() - start
    walls.sort(); reads.sort()
    busy = sum(walls)
    print("%-28s batches %3d x %d: batch median %6.2f ms, read median %6.2f ms, %5.2f GB/s while reading, %5.2f GB/s overall" % (
        name, count, m, walls[len(walls) // 2] * 1e3, reads[len(reads) // 2] * 1e3,
        count * m * record / busy / 1e9, count * m * record / total / 1e9), flush=True)

# The decode's pattern: a layer's misses (1-2 at once) between a layer's
# compute (0.3 ms at 16 threads for OLMoE) and a token's (2 ms); and the
# probe's (back to back).
for rnd in range(2):
    test("back to back, 1 at once", 1, 0, 150)
    test("back to back, 2 at once", 2, 0, 100)
    test("back to back, 4 at once", 4, 0, 60)
    test("gap 0.3 ms, 1 at once", 1, 0.0003, 150)
    test("gap 0.3 ms, 2 at once", 2, 0.0003, 100)
    test("gap 2 ms, 1 at once", 1, 0.002, 120)
    test("gap 2 ms, 2 at once", 2, 0.002, 100)
    test("gap 2 ms, 4 at once", 4, 0.002, 60)
    test("gap 5 ms, 1 at once", 1, 0.005, 100)
