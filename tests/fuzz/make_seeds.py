#!/usr/bin/env python3
"""Writes the seed corpora under tests/fuzz/corpus/<target>/seed-* (small valid inputs).

Run from anywhere: python3 tests/fuzz/make_seeds.py. The encodings follow the formats documented
in the parsers' headers (core/byte_codec.h, storage/remote/peer_messages.h, connector/src/metadata.cc,
storage/disk/record_format.h, core/frame_io.h, proto/strata/v1/engine.proto); a seed that a format
change makes invalid is still a valid fuzz input, only a weaker starting point.
"""
import os
import struct

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "corpus")


def write(target, name, data):
    d = os.path.join(ROOT, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, "seed-" + name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def s(text):  # byte_codec string: u32 length + bytes
    b = text.encode() if isinstance(text, str) else text
    return struct.pack("<I", len(b)) + b


def u64s(values):
    return struct.pack("<I", len(values)) + b"".join(struct.pack("<Q", v) for v in values)


# ---- peer_messages_fuzz: type byte + byte_codec fields ----
write("peer_messages_fuzz", "handshake",
      b"\x01" + struct.pack("<I", 2) + s("node-a") + s("10.0.0.1:7100") +
      u64s([0x1122334455667788]))
write("peer_messages_fuzz", "handshake-reply", b"\x01" + s("node-b") + u64s([1, 2]))
write("peer_messages_fuzz", "ping", b"\x02")

# ---- peer_auth_fuzz: mode byte, then a stranger's messages or the network's actions ----
auth_challenge = (struct.pack("<IBBHHH", 0x53545254, 1, 1, 2, 2, 0) + b"\x11" * 32 + b"\x00" * 32)
write("peer_auth_fuzz", "stranger-challenge",
      b"\x00\x00" + bytes([len(auth_challenge)]) + auth_challenge)
write("peer_auth_fuzz", "stranger-proof",
      b"\x00\x01" + bytes([len(auth_challenge)]) + auth_challenge[:4] + b"\x02" +
      auth_challenge[5:-32] + b"\x22" * 32)
# A dialler's challenge carrying a nonce of the daemon's other link (0x0e each), as a relay between
# two of its links would deliver it, and one carrying the listener's own (0x5e each).
for name, fill in (("stranger-relayed", 0x0E), ("stranger-reflected", 0x5E)):
    relayed = auth_challenge[:12] + bytes([fill]) * 32 + auth_challenge[44:]
    write("peer_auth_fuzz", name, b"\x00\x00" + bytes([len(relayed)]) + relayed)
# Both challenges delivered, then both proofs: a clean handshake.
write("peer_auth_fuzz", "network-clean", b"\x01\x01\x00\x00\x01")
# The same with a duplicate, a drop and a corrupted nonce byte on the way.
write("peer_auth_fuzz", "network-faults", b"\x01\x05\x01\x03\x06\x10\x00\x00\x01")
# A relay hands the dialler its own challenge first.
write("peer_auth_fuzz", "network-relayed", b"\x01\x08\x00\x01\x00\x01")
write("peer_messages_fuzz", "release", b"\x12" + struct.pack("<Q", 42))
write("peer_messages_fuzz", "push-reply", b"\x13" + struct.pack("<Iii", 2, 0, 6))
write("peer_messages_fuzz", "query-empty", b"\x10" + struct.pack("<I", 0))
write("peer_messages_fuzz", "stream-layers", b"\x15" + struct.pack("<QI", 1, 2))
write("peer_messages_fuzz", "stream-commit", b"\x16" + struct.pack("<QIQQ", 1, 2, 7, 8))
write("peer_messages_fuzz", "stream-abort", b"\x17" + struct.pack("<Q", 1))
write("peer_messages_fuzz", "stream-reply", b"\x96" + struct.pack("<Iii", 2, 0, 15))

# ---- connector_metadata_fuzz: "STCM", u32 version 3, block_size, chunk_tokens, specs ----
def spec(request_id, tokens, begin, end, blocks, flags=0, hold=0):
    return (s(request_id) + struct.pack("<I", len(tokens)) +
            b"".join(struct.pack("<I", t) for t in tokens) + s("") + s("") +
            struct.pack("<qq", begin, end) + struct.pack("<I", len(blocks)) +
            b"".join(struct.pack("<i", b) for b in blocks) + struct.pack("<BI", flags, hold))

header = b"STCM" + struct.pack("<III", 3, 16, 16)
write("connector_metadata_fuzz", "empty", header + struct.pack("<III", 0, 0, 0))
write("connector_metadata_fuzz", "load-save",
      header + struct.pack("<I", 1) + spec("req-1", list(range(32)), 0, 32, [0, 1]) +
      struct.pack("<I", 1) + spec("req-2", list(range(16)), 0, 16, [3], flags=2, hold=100) +
      struct.pack("<I", 1) + s("req-0"))

# ---- disk_record_fuzz: mode byte + input ----
key = struct.pack("<BBQ", 1, 1, 0xABCDEF) + bytes(range(16))  # xxh3_128, prefix namespace
block = bytearray(4096)
struct.pack_into("<QIIQQQIHH", block, 0, 0x314B534454525453, 1, 4096, 4096, 0, 0xABCDEF, 16,
                 len(key), 0)
block[48:48 + len(key)] = key
write("disk_record_fuzz", "header-fixed-checksum", b"\x01" + bytes(block[:256]))
write("disk_record_fuzz", "header", b"\x00" + bytes(block[:256]))
write("disk_record_fuzz", "key", b"\x02" + key)
write("disk_record_fuzz", "segment-name", b"\x03segment-0000000042.log")
write("disk_record_fuzz", "segment", b"\x04" + bytes(block) + bytes(4096))

# ---- config_fuzz: TOML documents ----
write("config_fuzz", "empty", "")
write("config_fuzz", "host", '[host]\ncapacity = "64MiB"\npage_bytes = 4096\n')
write("config_fuzz", "logging", '[logging]\nlevel = "debug"\n')


# ---- engine_request_fuzz: frames of EngineRequest (protobuf wire format) ----
def varint(v):
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, payload):  # length-delimited
    return varint(num << 3 | 2) + varint(len(payload)) + payload


def vfield(num, v):
    return varint(num << 3) + varint(v)


def frame(msg):
    return struct.pack("<I", len(msg)) + msg


# A valid layout: MHA, 2 layers, 2 heads of 16, bf16, tp_world_size 1, RoPE applied, 16 tokens.
def layout_fields(num_layers=2):
    return (field(1, b"test-model") + vfield(2, 1) + vfield(3, num_layers) + vfield(4, 2) +
            vfield(5, 16) + vfield(6, 2) + vfield(8, 1) + vfield(9, 1) + vfield(10, 16))


layout = layout_fields()
handshake = vfield(1, 1) + field(2, vfield(1, 2) + field(2, b"engine-0") + field(3, layout))
chain = vfield(1, 1) + vfield(2, 1) + b"\x19" + struct.pack("<Q", 0xABCDEF) + field(4, bytes(32))
lookup = vfield(1, 2) + field(3, field(2, chain) + vfield(4, 32))
load = vfield(1, 3) + field(4, field(3, chain))
commit = vfield(1, 4) + field(6, field(1, varint(1) + varint(2)))
write("engine_request_fuzz", "handshake", frame(handshake))
write("engine_request_fuzz", "session", frame(handshake) + frame(lookup) + frame(load) +
      frame(commit))
write("engine_request_fuzz", "truncated", frame(handshake)[:7])

# ---- engine_handshake_fuzz: the same stream, served by a session from its first frame ----
write("engine_handshake_fuzz", "handshake", frame(handshake))
write("engine_handshake_fuzz", "handshake-twice", frame(handshake) + frame(handshake))
write("engine_handshake_fuzz", "lookup-first", frame(lookup) + frame(handshake))
write("engine_handshake_fuzz", "old-version",
      frame(vfield(1, 1) + field(2, vfield(1, 1) + field(2, b"engine-0") + field(3, layout))))
write("engine_handshake_fuzz", "no-layers",
      frame(vfield(1, 1) + field(2, vfield(1, 2) + field(3, layout_fields(num_layers=0)))))
write("engine_handshake_fuzz", "handshake-then-load", frame(handshake) + frame(load))

# ---- control_lookup_fuzz: LookupRequest (protobuf wire format): layout, tokens or keys ----
# Field 2 (tokens) is packed varints, field 7 (tokens_fixed32) packed little-endian words; an
# encoder may also send either unpacked, one element per tag.
lookup_tokens = [1, 300, 70000, 4000000000]
write("control_lookup_fuzz", "tokens-packed",
      field(1, layout) + field(2, b"".join(varint(t) for t in lookup_tokens)))
write("control_lookup_fuzz", "tokens-fixed32-packed",
      field(1, layout) + field(7, b"".join(struct.pack("<I", t) for t in lookup_tokens)))
write("control_lookup_fuzz", "tokens-unpacked",
      field(1, layout) + b"".join(vfield(2, t) for t in lookup_tokens))
write("control_lookup_fuzz", "tokens-fixed32-unpacked",
      field(1, layout) + b"".join(varint(7 << 3 | 5) + struct.pack("<I", t) for t in lookup_tokens))

# ---- codec_frame_fuzz: mode, codec index, layout index, tokens, group_size, bits, mutations ----
# Codecs by index: 0 int8, 1 kivi4, 2 kivi2, 3 cachegen, 4 xkv, 5 kivi8, 6 drop_sink_recent,
# 7 drop_h2o (CodecRegistry::All()).
for codec, name in enumerate(["int8", "kivi4", "kivi2", "cachegen", "xkv", "kivi8",
                              "drop_sink_recent", "drop_h2o"]):
    for layout in range(4):
        write("codec_frame_fuzz", f"{name}-layout{layout}", bytes([0, codec, layout, 255, 0, 0]))
    # A bit flipped in layer 1's section with the checksums recomputed; low-rank KV.
    write("codec_frame_fuzz", f"{name}-mutated", bytes([5, codec, 0, 31, 0, 0]) +
          struct.pack("<IB", 0x600, 0x10))
write("codec_frame_fuzz", "cachegen-4bit-groups", bytes([0, 3, 0, 63, 64, 4]))
write("codec_frame_fuzz", "xkv-groups-of-1", bytes([4, 4, 1, 39, 1, 0]))
write("codec_frame_fuzz", "drop-blocks-of-8", bytes([0, 7, 0, 63, 8, 0]))
write("codec_frame_fuzz", "raw-magic", bytes([2, 0, 0, 0, 0, 0]) + b"SKVC" + bytes(60))

# ---- vllm_events_fuzz: byte 0 (bit 0 sha256_cbor, bits 1-2 block size 1/4/16/64), msgpack ----
def mp(obj):  # the msgpack subset vLLM's KVEventBatch uses
    if obj is None:
        return b"\xc0"
    if isinstance(obj, float):
        return b"\xcb" + struct.pack(">d", obj)
    if isinstance(obj, int):
        return bytes([obj]) if obj < 128 else b"\xcf" + struct.pack(">Q", obj)
    if isinstance(obj, bytes):
        return b"\xc4" + bytes([len(obj)]) + obj
    if isinstance(obj, str):
        return bytes([0xa0 | len(obj)]) + obj.encode()
    assert len(obj) < 16
    return bytes([0x90 | len(obj)]) + b"".join(mp(o) for o in obj)


stored = ["BlockStored", [11, 12], None, [1, 2, 3, 4, 5, 6, 7, 8], 4, None, "GPU"]
child = ["BlockStored", [13], 12, [9, 10, 11, 12], 4, None, "CPU", "sql", None, 0]
write("vllm_events_fuzz", "stored", bytes([2]) + mp([1.5e9, [stored, child], None]))
write("vllm_events_fuzz", "removed-cleared",
      bytes([2]) + mp([1.5e9, [stored, ["BlockRemoved", [12], "GPU"], ["AllBlocksCleared"]]]))
write("vllm_events_fuzz", "sha256-bytes", bytes([1]) + mp(
    [1.5e9, [["BlockStored", [b"\x01" * 32], None, [1], 1, None, None]]]))
