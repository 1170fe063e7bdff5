#!/usr/bin/env python3
"""Mutation differential test: random edits of the corpus files (seeded, so
every run checks the same inputs) go through protoc --encode and our parser
(tf_encode); both must accept or both reject, with identical bytes when they
accept -- except the documented stricter cases (see tests/textformat/stricter).

usage: mutate_diff.py CORPUS_DIR TF_ENCODE PROTO_DIR SEED COUNT
"""
import glob
import random
import subprocess
import sys

corpus, tf, proto_dir, seed, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
rng = random.Random(seed)

seeds = []
for f in sorted(glob.glob(corpus + '/valid/*.txtpb') + glob.glob(corpus + '/invalid/*.txtpb')):
    data = open(f, 'rb').read()
    if b'deep' in f.encode() or b'long' in f.encode():
        continue
    typ = data.split(b'\n', 1)[0].split(b': ', 1)[1].decode()
    seeds.append((typ, data))

PIECES = [b'-', b'0x', b'0', b'1', b'.', b'e', b'f', b'"', b"'", b'\\', b'\\x', b'\\u', b'\\U',
          b'{', b'}', b'<', b'>', b'[', b']', b':', b',', b';', b'#', b'\n', b' ', b'inf', b'nan',
          b'-inf', b'true', b'9', b'8', b'00', b'1e', b'1.5f', b'E', b'x', b'\t', b'\r', b'\x7f',
          b'_', b'i32', b'r_i32', b'str', b'by', b'color', b'db', b'fl', b'b', b'u64', b'inner',
          b'o_int', b'o_str', b'\\0', b'\\377', b'GREEN', b'MINUS', b'2147483648', b'4294967296',
          b'18446744073709551616', b'9223372036854775808', b'-0', b'regions', b'id', b'threshold']

# What we refuse on purpose where protoc accepts (tests/textformat/stricter).
STRICTER = ('cannot hold a NUL character', 'is not valid UTF-8', 'missing required field',
            'nested more than 100 deep')


def mutate(d):
    d = bytearray(d)
    for _ in range(rng.randint(1, 8)):
        op = rng.random()
        pos = rng.randint(0, len(d))
        if op < 0.4:
            d[pos:pos] = rng.choice(PIECES)
        elif op < 0.7 and d:
            del d[pos:pos + rng.randint(1, 4)]
        elif op < 0.85 and d:
            src = rng.randint(0, len(d))
            d[pos:pos] = d[src:src + rng.randint(1, 12)]
        else:
            d[pos:pos] = bytes([rng.randint(0, 255)])
    return bytes(d)


bad = 0
for i in range(count):
    typ, data = rng.choice(seeds)
    data = mutate(data)
    if typ.startswith('fatest3.'):
        args = ['--proto_path=' + corpus, 'testmsg3.proto']
    elif typ.startswith('fatest.'):
        args = ['--proto_path=' + corpus, 'testmsg.proto']
    else:
        args = ['--proto_path=' + proto_dir, 'config.proto']
    p = subprocess.run(['protoc', '--encode=' + typ] + args, input=data, capture_output=True)
    o = subprocess.run([tf, typ], input=data, capture_output=True)
    oerr = o.stderr.decode('utf-8', 'replace')
    if p.returncode == 0 and o.returncode != 0 and any(s in oerr for s in STRICTER):
        continue
    if (p.returncode == 0) == (o.returncode == 0) and (p.returncode != 0 or p.stdout == o.stdout):
        continue
    bad += 1
    print('DISAGREE (%s) protoc rc=%d ours rc=%d on input %r' % (typ, p.returncode, o.returncode, data))
    print('  protoc: ' + p.stderr.decode('utf-8', 'replace')[:300].strip())
    print('  ours:   ' + oerr[:300].strip())
print('mutation differential: %d inputs, %d disagreements' % (count, bad))
sys.exit(1 if bad else 0)
